-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.raw_log.appends:_KEYED (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.idempotency_key = :key::VARCHAR;

-- lovia_store.sessions.raw_log.reads:_DENSITY
-- not run on postgresql (runs where: not subquery_limits)

-- lovia_store.sessions.raw_log.reads:_HEAD
SELECT lovia_sessions.parent_session_id, lovia_sessions.session_type, lovia_sessions.title, lovia_sessions.agent_name
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.reads:_LATEST_SNAPSHOT
SELECT lovia_snapshots.session_id, lovia_snapshots.version, lovia_snapshots.snapshot_id, lovia_snapshots.compacted_through_sequence, lovia_snapshots.summary_json, lovia_snapshots.envelope_json, lovia_snapshots.created_at, lovia_snapshots.updated_at
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant::VARCHAR AND lovia_snapshots.session_id = :sid::VARCHAR ORDER BY lovia_snapshots.version DESC
 LIMIT :param_1::INTEGER;
-- values: param_1=1

-- lovia_store.sessions.raw_log.reads:_OFFSET_PAGE
SELECT lovia_messages.session_id, lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.message_id, lovia_messages.entry_json AS entry_json, lovia_messages.envelope_json, lovia_messages.metadata_json, lovia_messages.tags_json, lovia_messages.started_at, lovia_messages.completed_at, lovia_messages.duration_ns, lovia_messages.reasoning_started_at, lovia_messages.reasoning_completed_at, lovia_messages.reasoning_duration_ns, lovia_messages.content_started_at, lovia_messages.content_completed_at, lovia_messages.content_duration_ns, lovia_messages.input_tokens, lovia_messages.output_tokens, lovia_messages.cache_read_tokens, lovia_messages.cache_write_tokens, lovia_messages.reasoning_tokens, lovia_messages.created_at, lovia_messages.updated_at
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence > (SELECT CASE WHEN (lovia_sessions.message_count = lovia_sessions.last_sequence) THEN :lower::BIGINT + :skip::BIGINT ELSE :lower::BIGINT END AS anon_1
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR) AND lovia_messages.sequence <= :through::BIGINT ORDER BY lovia_messages.sequence
 LIMIT :limit::BIGINT OFFSET coalesce((SELECT CASE WHEN (lovia_sessions.message_count = lovia_sessions.last_sequence) THEN :param_1::INTEGER ELSE :skip::BIGINT END AS anon_2
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR), :coalesce_1::INTEGER);
-- values: coalesce_1=0, param_1=0

-- lovia_store.sessions.raw_log.reads:_PAGE
SELECT lovia_messages.session_id, lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.message_id, lovia_messages.entry_json AS entry_json, lovia_messages.envelope_json, lovia_messages.metadata_json, lovia_messages.tags_json, lovia_messages.started_at, lovia_messages.completed_at, lovia_messages.duration_ns, lovia_messages.reasoning_started_at, lovia_messages.reasoning_completed_at, lovia_messages.reasoning_duration_ns, lovia_messages.content_started_at, lovia_messages.content_completed_at, lovia_messages.content_duration_ns, lovia_messages.input_tokens, lovia_messages.output_tokens, lovia_messages.cache_read_tokens, lovia_messages.cache_write_tokens, lovia_messages.reasoning_tokens, lovia_messages.created_at, lovia_messages.updated_at
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence > :lower::BIGINT AND lovia_messages.sequence <= :through::BIGINT ORDER BY lovia_messages.sequence
 LIMIT :limit::BIGINT OFFSET :skip::BIGINT;

-- lovia_store.sessions.raw_log.reads:_TAIL
SELECT lovia_messages.session_id, lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.message_id, lovia_messages.entry_json AS entry_json, lovia_messages.envelope_json, lovia_messages.metadata_json, lovia_messages.tags_json, lovia_messages.started_at, lovia_messages.completed_at, lovia_messages.duration_ns, lovia_messages.reasoning_started_at, lovia_messages.reasoning_completed_at, lovia_messages.reasoning_duration_ns, lovia_messages.content_started_at, lovia_messages.content_completed_at, lovia_messages.content_duration_ns, lovia_messages.input_tokens, lovia_messages.output_tokens, lovia_messages.cache_read_tokens, lovia_messages.cache_write_tokens, lovia_messages.reasoning_tokens, lovia_messages.created_at, lovia_messages.updated_at
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND lovia_messages.sequence > :boundary::BIGINT ORDER BY lovia_messages.sequence;

-- lovia_store.sessions.raw_log.session_rows:_DELETE_MESSAGES
DELETE FROM lovia_messages WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.session_rows:_DELETE_RUNS
DELETE FROM lovia_session_runs WHERE lovia_session_runs.tenant = :tenant::VARCHAR AND lovia_session_runs.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.session_rows:_DELETE_SESSION
DELETE FROM lovia_sessions WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.session_rows:_DELETE_SNAPSHOTS
DELETE FROM lovia_snapshots WHERE lovia_snapshots.tenant = :tenant::VARCHAR AND lovia_snapshots.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.session_rows:_LOCKED
SELECT lovia_sessions.session_id
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR FOR UPDATE;

-- lovia_store.sessions.raw_log.session_rows:_MESSAGE_COUNT
SELECT lovia_sessions.message_count
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.session_rows:_SUMMARY
SELECT lovia_sessions.session_id, lovia_sessions.parent_session_id, lovia_sessions.session_type, lovia_sessions.title, lovia_sessions.agent_name, lovia_sessions.message_count, lovia_sessions.created_at, lovia_sessions.updated_at, lovia_sessions.forked_from_session_id, lovia_sessions.forked_at_entry
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant::VARCHAR AND lovia_sessions.session_id = :sid::VARCHAR;

-- lovia_store.sessions.raw_log.stored:_SHARING_ENTRIES
SELECT lovia_messages.entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant::VARCHAR AND lovia_messages.session_id = :sid::VARCHAR AND (lovia_messages.entry_json LIKE :entry_json_1::VARCHAR || '%' ESCAPE '/');
-- values: entry_json_1='\x01r'
