-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.trim:_EMPTY_RUNS (prepared)
SELECT lovia_session_runs.first_sequence
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant::VARCHAR AND lovia_session_runs.session_id = :sid::VARCHAR AND lovia_session_runs.entry_count = :entry_count_1::BIGINT ORDER BY lovia_session_runs.first_sequence DESC;
-- values: entry_count_1=0

-- lovia_store.sessions.trim:_LOCK_CANDIDATES (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.entry_type = :entry_type_1::VARCHAR AND (octet_length(lovia_messages.entry_json) > :keep::BIGINT OR (lovia_messages.entry_json LIKE :entry_json_1::VARCHAR || '%' ESCAPE '/') OR (lovia_messages.entry_json LIKE :entry_json_2::VARCHAR || '%' ESCAPE '/')) FOR UPDATE;
-- values: entry_json_1='\x01r', entry_json_2='\x01z', entry_type_1='tool_result'

-- lovia_store.sessions.trim:_TRIM (prepared)
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.sessions.trim:_TRIM_CANDIDATES (prepared)
SELECT lovia_messages.sequence, lovia_messages.entry_json AS entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence < :cutoff::BIGINT AND lovia_messages.entry_type = :entry_type_1::VARCHAR AND (octet_length(lovia_messages.entry_json) > :keep::BIGINT OR (lovia_messages.entry_json LIKE :entry_json_1::VARCHAR || '%' ESCAPE '/') OR (lovia_messages.entry_json LIKE :entry_json_2::VARCHAR || '%' ESCAPE '/'));
-- values: entry_json_1='\x01r', entry_json_2='\x01z', entry_type_1='tool_result'

-- lovia_store.sessions.trim:_TRIM_IN_ONE_STATEMENT (prepared)
UPDATE lovia_messages SET entry_json=given.doc, envelope_json=NULL, updated_at=:now::TIMESTAMP WITH TIME ZONE FROM unnest(:seqs::TEXT[], :docs::TEXT[]) AS given(seq, doc) WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence = CAST(given.seq AS BIGINT);
