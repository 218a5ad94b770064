-- Golden SQL, sqlite: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.entry_rows:_DELETE_ROW (prepared)
DELETE FROM lovia_messages WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.entry_rows:_DOCUMENT (prepared)
SELECT lovia_messages.entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.entry_rows:_HAS_MULTIPLE (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.entry_type = :entry_type_1
 LIMIT :param_1 OFFSET :param_2;
-- values: entry_type_1='entries', param_1=1, param_2=0

-- lovia_store.sessions.entry_rows:_REWRITE (prepared)
UPDATE lovia_messages SET entry_type=:entry_type, call_id=:call_id, entry_json=:doc, envelope_json=NULL, updated_at=:now WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.entry_rows:_ROWS (prepared)
SELECT lovia_messages.sequence, CASE WHEN (lovia_messages.entry_type = :entry_type_1) THEN lovia_messages.entry_json END AS anon_1
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence;
-- values: entry_type_1='entries'

-- lovia_store.sessions.rewind:_CUT_ROW (prepared)
SELECT lovia_messages.sequence, lovia_messages.run_id, lovia_messages.request_id
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence
 LIMIT :param_1 OFFSET :keep;
-- values: param_1=1

-- lovia_store.sessions.rewind:_DELETE_COVERING_SNAPSHOTS (prepared)
DELETE FROM lovia_snapshots WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :sid AND lovia_snapshots.compacted_through_sequence >= :lowest;

-- lovia_store.sessions.rewind:_DELETE_CUT_RUN (prepared)
DELETE FROM lovia_session_runs WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND lovia_session_runs.run_id = :cut_run_id;

-- lovia_store.sessions.rewind:_DELETE_LATER_RUNS (prepared)
DELETE FROM lovia_session_runs WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND (lovia_session_runs.entry_count > :entry_count_1 AND lovia_session_runs.first_sequence >= :cut OR lovia_session_runs.entry_count = :entry_count_2 AND lovia_session_runs.first_sequence > :empty_after);
-- values: entry_count_1=0, entry_count_2=0

-- lovia_store.sessions.rewind:_DELETE_ONE (prepared)
DELETE FROM lovia_messages WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.rewind:_DELETE_TAIL (prepared)
DELETE FROM lovia_messages WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence >= :cut;

-- lovia_store.sessions.rewind:_RESET_SNAPSHOT_VERSION (prepared)
UPDATE lovia_sessions SET snapshot_version=(SELECT coalesce(max(lovia_snapshots.version), :coalesce_2) AS coalesce_1
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :sid) WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :sid;
-- values: coalesce_2=0

-- lovia_store.sessions.rewind:_REWOUND_SESSION (prepared)
UPDATE lovia_sessions SET message_count=(lovia_sessions.message_count - :removed), updated_at=:now WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :sid;

-- lovia_store.sessions.rewind:_SELECT_LATER_RUNS (prepared)
SELECT lovia_session_runs.run_id
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND (lovia_session_runs.entry_count > :entry_count_1 AND lovia_session_runs.first_sequence >= :cut OR lovia_session_runs.entry_count = :entry_count_2 AND lovia_session_runs.first_sequence > :empty_after);
-- values: entry_count_1=0, entry_count_2=0

-- lovia_store.sessions.rewind:_SHORTEN_CUT_RUN (prepared)
UPDATE lovia_session_runs SET entry_count=:remaining, meta_json=NULL WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND lovia_session_runs.run_id = :cut_run_id;
