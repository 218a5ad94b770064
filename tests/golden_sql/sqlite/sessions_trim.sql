-- Golden SQL, sqlite: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.trim:_EMPTY_RUNS (prepared)
SELECT lovia_session_runs.first_sequence
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND lovia_session_runs.entry_count = :entry_count_1 ORDER BY lovia_session_runs.first_sequence DESC;
-- values: entry_count_1=0

-- lovia_store.sessions.trim:_LOCK_CANDIDATES (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.entry_type = :entry_type_1 AND (length(CAST(lovia_messages.entry_json AS BLOB)) > :keep OR (lovia_messages.entry_json LIKE :entry_json_1 || '%' ESCAPE '/') OR (lovia_messages.entry_json LIKE :entry_json_2 || '%' ESCAPE '/'));
-- values: entry_json_1='\x01r', entry_json_2='\x01z', entry_type_1='tool_result'

-- lovia_store.sessions.trim:_TRIM (prepared)
UPDATE lovia_messages SET entry_json=:doc, envelope_json=NULL, updated_at=:now WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.trim:_TRIM_CANDIDATES (prepared)
SELECT lovia_messages.sequence, CAST(lovia_messages.entry_json AS BLOB) AS entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence < :cutoff AND lovia_messages.entry_type = :entry_type_1 AND (length(CAST(lovia_messages.entry_json AS BLOB)) > :keep OR (lovia_messages.entry_json LIKE :entry_json_1 || '%' ESCAPE '/') OR (lovia_messages.entry_json LIKE :entry_json_2 || '%' ESCAPE '/'));
-- values: entry_json_1='\x01r', entry_json_2='\x01z', entry_type_1='tool_result'

-- lovia_store.sessions.trim:_TRIM_IN_ONE_STATEMENT (prepared)
-- not run on sqlite (runs where: one_statement_writes)
