-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.log:RUN_STORED
SELECT lovia_session_runs.position
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant::VARCHAR AND lovia_session_runs.session_id = :sid::VARCHAR AND lovia_session_runs.run_id = :run_id::VARCHAR;

-- lovia_store.sessions.log:_APPEND_IN_ONE_STATEMENT (prepared)
WITH bump AS
(INSERT INTO lovia_sessions (tenant, session_id, parent_session_id, session_type, title, agent_name, last_sequence, message_count, run_count, created_at, updated_at) VALUES (:tenant::VARCHAR, :sid::VARCHAR, :parent_session_id::VARCHAR, :session_type::INTEGER, :title::VARCHAR, :agent_name::VARCHAR, :messages::BIGINT, :messages::BIGINT, :runs::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE) ON CONFLICT (tenant, session_id) DO UPDATE SET last_sequence = (lovia_sessions.last_sequence + :messages::BIGINT), message_count = (lovia_sessions.message_count + :messages::BIGINT), run_count = (lovia_sessions.run_count + :runs::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE RETURNING lovia_sessions.last_sequence, lovia_sessions.run_count, lovia_sessions.parent_session_id),
run AS
(INSERT INTO lovia_session_runs (tenant, session_id, run_id, position, first_sequence, entry_count, meta_json, created_at) SELECT :tenant::VARCHAR AS anon_1, :sid::VARCHAR AS anon_2, :run_id::VARCHAR AS anon_3, bump.run_count AS run_count, (bump.last_sequence - :messages::BIGINT) + 1 AS anon_6, :messages::BIGINT AS anon_7, :meta_json::VARCHAR AS anon_8, :now::TIMESTAMP WITH TIME ZONE AS anon_4
FROM bump RETURNING lovia_session_runs.first_sequence),
entries AS
(INSERT INTO lovia_messages (tenant, session_id, request_id, run_id, created_at, sequence, entry_type, call_id, entry_json) SELECT :tenant::VARCHAR AS anon_1, :sid::VARCHAR AS anon_2, :run_id::VARCHAR AS anon_3, :run_id::VARCHAR AS anon__1, :now::TIMESTAMP WITH TIME ZONE AS anon_4, (run.first_sequence + given.ordinality) - 1 AS anon_5, given.entry_type AS entry_type, given.call_id AS call_id, given.entry_json AS entry_json
FROM run JOIN unnest(:entry_types::TEXT[], :call_ids::TEXT[], :documents::TEXT[]) WITH ORDINALITY AS given(entry_type, call_id, entry_json, ordinality) ON true)
 SELECT run.first_sequence
FROM run;

-- lovia_store.sessions.log:_APPEND_SHARING_IN_ONE_STATEMENT (prepared)
WITH bump AS
(INSERT INTO lovia_sessions (tenant, session_id, parent_session_id, session_type, title, agent_name, last_sequence, message_count, run_count, created_at, updated_at) VALUES (:tenant::VARCHAR, :sid::VARCHAR, :parent_session_id::VARCHAR, :session_type::INTEGER, :title::VARCHAR, :agent_name::VARCHAR, :messages::BIGINT, :messages::BIGINT, :runs::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE) ON CONFLICT (tenant, session_id) DO UPDATE SET last_sequence = (lovia_sessions.last_sequence + :messages::BIGINT), message_count = (lovia_sessions.message_count + :messages::BIGINT), run_count = (lovia_sessions.run_count + :runs::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE RETURNING lovia_sessions.last_sequence, lovia_sessions.run_count, lovia_sessions.parent_session_id),
run AS
(INSERT INTO lovia_session_runs (tenant, session_id, run_id, position, first_sequence, entry_count, meta_json, created_at) SELECT :tenant::VARCHAR AS anon_1, :sid::VARCHAR AS anon_2, :run_id::VARCHAR AS anon_3, bump.run_count AS run_count, (bump.last_sequence - :messages::BIGINT) + 1 AS anon_6, :messages::BIGINT AS anon_7, :meta_json::VARCHAR AS anon_8, :now::TIMESTAMP WITH TIME ZONE AS anon_4
FROM bump RETURNING lovia_session_runs.first_sequence),
entries AS
(INSERT INTO lovia_messages (tenant, session_id, request_id, run_id, created_at, sequence, entry_type, call_id, entry_json) SELECT :tenant::VARCHAR AS anon_1, :sid::VARCHAR AS anon_2, :run_id::VARCHAR AS anon_3, :run_id::VARCHAR AS anon__1, :now::TIMESTAMP WITH TIME ZONE AS anon_4, (run.first_sequence + given.ordinality) - 1 AS anon_5, given.entry_type AS entry_type, given.call_id AS call_id, given.entry_json AS entry_json
FROM run JOIN unnest(:entry_types::TEXT[], :call_ids::TEXT[], :documents::TEXT[]) WITH ORDINALITY AS given(entry_type, call_id, entry_json, ordinality) ON true),
counted AS
(INSERT INTO lovia_contents (tenant, digest, refs, size, data) SELECT :tenant::VARCHAR AS anon_1, shared.digest AS digest, CAST(shared.refs AS BIGINT) AS refs, CAST(shared.size AS BIGINT) AS size, decode(shared.data, 'base64') AS decode_1
FROM unnest(:digests::TEXT[], :counts::TEXT[], :sizes::TEXT[], :values::TEXT[]) AS shared(digest, refs, size, data) ON CONFLICT (tenant, digest) DO UPDATE SET refs = (lovia_contents.refs + excluded.refs))
 SELECT run.first_sequence
FROM run;

-- lovia_store.sessions.log:_BUMPED (prepared)
-- not run on postgresql (runs where: not returning)

-- lovia_store.sessions.log:_INSERT_MESSAGE (prepared)
INSERT INTO lovia_messages (tenant, session_id, sequence, request_id, run_id, entry_type, call_id, entry_json, envelope_json, metadata_json, tags_json, started_at, completed_at, duration_ns, reasoning_started_at, reasoning_completed_at, reasoning_duration_ns, content_started_at, content_completed_at, content_duration_ns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, message_id, idempotency_key, created_at) VALUES (:tenant::VARCHAR, :session_id::VARCHAR, :sequence::BIGINT, :request_id::VARCHAR, :run_id::VARCHAR, :entry_type::VARCHAR, :call_id::VARCHAR, :entry_json::VARCHAR, :envelope_json::VARCHAR, :metadata_json::VARCHAR, :tags_json::VARCHAR, :started_at::TIMESTAMP WITH TIME ZONE, :completed_at::TIMESTAMP WITH TIME ZONE, :duration_ns::BIGINT, :reasoning_started_at::TIMESTAMP WITH TIME ZONE, :reasoning_completed_at::TIMESTAMP WITH TIME ZONE, :reasoning_duration_ns::BIGINT, :content_started_at::TIMESTAMP WITH TIME ZONE, :content_completed_at::TIMESTAMP WITH TIME ZONE, :content_duration_ns::BIGINT, :input_tokens::BIGINT, :output_tokens::BIGINT, :cache_read_tokens::BIGINT, :cache_write_tokens::BIGINT, :reasoning_tokens::BIGINT, :message_id::VARCHAR, :idempotency_key::VARCHAR, :created_at::TIMESTAMP WITH TIME ZONE);

-- lovia_store.sessions.log:_INSERT_MESSAGES (prepared)
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.sessions.log:bump_statement(dialect) (prepared)
INSERT INTO lovia_sessions (tenant, session_id, parent_session_id, session_type, title, agent_name, last_sequence, message_count, run_count, created_at, updated_at) VALUES (:tenant::VARCHAR, :sid::VARCHAR, :parent_session_id::VARCHAR, :session_type::INTEGER, :title::VARCHAR, :agent_name::VARCHAR, :messages::BIGINT, :messages::BIGINT, :runs::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE) ON CONFLICT (tenant, session_id) DO UPDATE SET last_sequence = (lovia_sessions.last_sequence + :messages::BIGINT), message_count = (lovia_sessions.message_count + :messages::BIGINT), run_count = (lovia_sessions.run_count + :runs::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE RETURNING lovia_sessions.last_sequence, lovia_sessions.run_count, lovia_sessions.parent_session_id;
