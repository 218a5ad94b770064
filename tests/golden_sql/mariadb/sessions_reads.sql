-- Golden SQL, mariadb: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.reads:BATCH
SELECT lovia_messages.sequence, lovia_messages.entry_json AS entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence > :after ORDER BY lovia_messages.sequence
 LIMIT :size;

-- lovia_store.sessions.reads:LOAD
SELECT lovia_messages.entry_json AS entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence;

-- lovia_store.sessions.reads:SEGMENT_ROWS
SELECT lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.entry_json AS entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence;

-- lovia_store.sessions.reads:SEGMENT_RUNS
SELECT lovia_session_runs.run_id, lovia_session_runs.first_sequence, lovia_session_runs.entry_count, lovia_session_runs.meta_json
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid ORDER BY lovia_session_runs.`position`;

-- lovia_store.sessions.reads:_ROWS_BELOW (prepared)
SELECT lovia_messages.sequence, lovia_messages.run_id, lovia_messages.request_id, lovia_messages.entry_type, lovia_messages.call_id
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence < :below ORDER BY lovia_messages.sequence DESC
 LIMIT :size;
