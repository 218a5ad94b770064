-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.stored:_REFERRING (prepared)
SELECT lovia_messages.sequence, lovia_messages.entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence >= :low::BIGINT AND lovia_messages.sequence <= :high::BIGINT AND (lovia_messages.entry_json LIKE :entry_json_1::VARCHAR || '%' ESCAPE '/');
-- values: entry_json_1='\x01r'

-- lovia_store.sessions.stored:_ROWS_LOCKED (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR FOR UPDATE;

-- lovia_store.sessions.stored:_SESSION_LOCKED
SELECT lovia_sessions.session_id
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR FOR UPDATE;
