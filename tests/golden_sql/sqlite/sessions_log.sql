-- Golden SQL, sqlite: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.log:RUN_STORED
SELECT lovia_session_runs.position
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND lovia_session_runs.run_id = :run_id;

-- lovia_store.sessions.log:_APPEND_IN_ONE_STATEMENT (prepared)
-- not run on sqlite (runs where: one_statement_writes)

-- lovia_store.sessions.log:_APPEND_SHARING_IN_ONE_STATEMENT (prepared)
-- not run on sqlite (runs where: one_statement_writes)

-- lovia_store.sessions.log:_BUMPED (prepared)
-- not run on sqlite (runs where: not returning)

-- lovia_store.sessions.log:_INSERT_MESSAGE (prepared)
INSERT INTO lovia_messages (tenant, session_id, sequence, request_id, run_id, entry_type, call_id, entry_json, envelope_json, metadata_json, tags_json, started_at, completed_at, duration_ns, reasoning_started_at, reasoning_completed_at, reasoning_duration_ns, content_started_at, content_completed_at, content_duration_ns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, message_id, idempotency_key, created_at) VALUES (:tenant, :session_id, :sequence, :request_id, :run_id, :entry_type, :call_id, :entry_json, :envelope_json, :metadata_json, :tags_json, :started_at, :completed_at, :duration_ns, :reasoning_started_at, :reasoning_completed_at, :reasoning_duration_ns, :content_started_at, :content_completed_at, :content_duration_ns, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens, :reasoning_tokens, :message_id, :idempotency_key, :created_at);

-- lovia_store.sessions.log:_INSERT_MESSAGES (prepared)
INSERT INTO lovia_messages (tenant, session_id, sequence, request_id, run_id, entry_type, call_id, entry_json, created_at) VALUES (:tenant, :session_id, :sequence, :request_id, :run_id, :entry_type, :call_id, :entry_json, :created_at);

-- lovia_store.sessions.log:bump_statement(dialect) (prepared)
INSERT INTO lovia_sessions (tenant, session_id, parent_session_id, session_type, title, agent_name, last_sequence, message_count, run_count, created_at, updated_at) VALUES (:tenant, :sid, :parent_session_id, :session_type, :title, :agent_name, :messages, :messages, :runs, :now, :now) ON CONFLICT (tenant, session_id) DO UPDATE SET last_sequence = (lovia_sessions.last_sequence + :messages), message_count = (lovia_sessions.message_count + :messages), run_count = (lovia_sessions.run_count + :runs), updated_at = :now RETURNING last_sequence, run_count, parent_session_id;
