-- Golden SQL, mariadb: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.sessions.fork:FORK_ORIGIN
SELECT lovia_sessions.forked_from_session_id, lovia_sessions.forked_at_entry
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :sid;

-- lovia_store.sessions.fork:_COPY_MESSAGES[False] (prepared)
INSERT INTO lovia_messages (tenant, session_id, sequence, request_id, run_id, entry_type, call_id, entry_json, envelope_json, metadata_json, tags_json, started_at, completed_at, duration_ns, reasoning_started_at, reasoning_completed_at, reasoning_duration_ns, content_started_at, content_completed_at, content_duration_ns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, message_id, idempotency_key, created_at, updated_at) SELECT lovia_messages.tenant, :new AS anon_1, lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.entry_type, lovia_messages.call_id, lovia_messages.entry_json, lovia_messages.envelope_json, lovia_messages.metadata_json, lovia_messages.tags_json, lovia_messages.started_at, lovia_messages.completed_at, lovia_messages.duration_ns, lovia_messages.reasoning_started_at, lovia_messages.reasoning_completed_at, lovia_messages.reasoning_duration_ns, lovia_messages.content_started_at, lovia_messages.content_completed_at, lovia_messages.content_duration_ns, lovia_messages.input_tokens, lovia_messages.output_tokens, lovia_messages.cache_read_tokens, lovia_messages.cache_write_tokens, lovia_messages.reasoning_tokens, lovia_messages.message_id, lovia_messages.idempotency_key, lovia_messages.created_at, lovia_messages.updated_at
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid;

-- lovia_store.sessions.fork:_COPY_MESSAGES[True] (prepared)
INSERT INTO lovia_messages (tenant, session_id, sequence, request_id, run_id, entry_type, call_id, entry_json, envelope_json, metadata_json, tags_json, started_at, completed_at, duration_ns, reasoning_started_at, reasoning_completed_at, reasoning_duration_ns, content_started_at, content_completed_at, content_duration_ns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, message_id, idempotency_key, created_at, updated_at) SELECT lovia_messages.tenant, :new AS anon_1, lovia_messages.sequence, lovia_messages.request_id, lovia_messages.run_id, lovia_messages.entry_type, lovia_messages.call_id, lovia_messages.entry_json, lovia_messages.envelope_json, lovia_messages.metadata_json, lovia_messages.tags_json, lovia_messages.started_at, lovia_messages.completed_at, lovia_messages.duration_ns, lovia_messages.reasoning_started_at, lovia_messages.reasoning_completed_at, lovia_messages.reasoning_duration_ns, lovia_messages.content_started_at, lovia_messages.content_completed_at, lovia_messages.content_duration_ns, lovia_messages.input_tokens, lovia_messages.output_tokens, lovia_messages.cache_read_tokens, lovia_messages.cache_write_tokens, lovia_messages.reasoning_tokens, lovia_messages.message_id, lovia_messages.idempotency_key, lovia_messages.created_at, lovia_messages.updated_at
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.sequence <= :bound;

-- lovia_store.sessions.fork:_COPY_RUNS[False] (prepared)
INSERT INTO lovia_session_runs (tenant, session_id, run_id, `position`, first_sequence, entry_count, meta_json, created_at) SELECT lovia_session_runs.tenant, :new AS anon_1, lovia_session_runs.run_id, lovia_session_runs.`position`, lovia_session_runs.first_sequence, lovia_session_runs.entry_count, lovia_session_runs.meta_json, lovia_session_runs.created_at
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid;

-- lovia_store.sessions.fork:_COPY_RUNS[True] (prepared)
INSERT INTO lovia_session_runs (tenant, session_id, run_id, `position`, first_sequence, entry_count, meta_json, created_at) SELECT lovia_session_runs.tenant, :new AS anon_1, lovia_session_runs.run_id, lovia_session_runs.`position`, lovia_session_runs.first_sequence, lovia_session_runs.entry_count, lovia_session_runs.meta_json, lovia_session_runs.created_at
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :sid AND lovia_session_runs.first_sequence <= :bound;

-- lovia_store.sessions.fork:_COPY_SNAPSHOTS[False] (prepared)
INSERT INTO lovia_snapshots (tenant, session_id, version, snapshot_id, compacted_through_sequence, summary_json, envelope_json, created_at, updated_at) SELECT lovia_snapshots.tenant, :new AS anon_1, lovia_snapshots.version, lovia_snapshots.snapshot_id, lovia_snapshots.compacted_through_sequence, lovia_snapshots.summary_json, lovia_snapshots.envelope_json, lovia_snapshots.created_at, lovia_snapshots.updated_at
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :sid;

-- lovia_store.sessions.fork:_COPY_SNAPSHOTS[True] (prepared)
INSERT INTO lovia_snapshots (tenant, session_id, version, snapshot_id, compacted_through_sequence, summary_json, envelope_json, created_at, updated_at) SELECT lovia_snapshots.tenant, :new AS anon_1, lovia_snapshots.version, lovia_snapshots.snapshot_id, lovia_snapshots.compacted_through_sequence, lovia_snapshots.summary_json, lovia_snapshots.envelope_json, lovia_snapshots.created_at, lovia_snapshots.updated_at
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :sid AND lovia_snapshots.compacted_through_sequence <= :bound;

-- lovia_store.sessions.fork:_FINISH (prepared)
UPDATE lovia_sessions SET last_sequence=:rows, message_count=:rows, snapshot_version=(SELECT coalesce(max(lovia_snapshots.version), :coalesce_2) AS coalesce_1
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :new) WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :new;
-- values: coalesce_2=0

-- lovia_store.sessions.fork:_MOVE_RUN (prepared)
UPDATE lovia_session_runs SET first_sequence=:to WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :new AND lovia_session_runs.run_id = :run_id;

-- lovia_store.sessions.fork:_MOVE_SNAPSHOT (prepared)
UPDATE lovia_snapshots SET compacted_through_sequence=:to WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :new AND lovia_snapshots.version = :version;

-- lovia_store.sessions.fork:_MULTIPLE_DOCUMENTS (prepared)
SELECT lovia_messages.entry_json
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND lovia_messages.entry_type = :entry_type_1;
-- values: entry_type_1='entries'

-- lovia_store.sessions.fork:_NTH_SEQUENCE (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence
 LIMIT :n, :param_1;
-- values: param_1=1

-- lovia_store.sessions.fork:_ORIGIN
SELECT lovia_sessions.parent_session_id, lovia_sessions.session_type, lovia_sessions.title, lovia_sessions.agent_name, lovia_sessions.message_count, lovia_sessions.run_count
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :sid;

-- lovia_store.sessions.fork:_ORIGIN_LOCKED
SELECT lovia_sessions.parent_session_id, lovia_sessions.session_type, lovia_sessions.title, lovia_sessions.agent_name, lovia_sessions.message_count, lovia_sessions.run_count
FROM lovia_sessions
WHERE lovia_sessions.tenant = :tenant AND lovia_sessions.session_id = :sid FOR UPDATE;

-- lovia_store.sessions.fork:_ORIGIN_SHARING (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid AND (lovia_messages.entry_json LIKE concat(:entry_json_1, '%') ESCAPE '/') LOCK IN SHARE MODE;
-- values: entry_json_1='\x01r'

-- lovia_store.sessions.fork:_RENUMBER (prepared)
UPDATE lovia_messages SET sequence=:to WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :new AND lovia_messages.sequence = :seq;

-- lovia_store.sessions.fork:_ROW_COUNT (prepared)
SELECT count(*) AS count_1
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid;

-- lovia_store.sessions.fork:_ROW_SIZES (prepared)
SELECT lovia_messages.sequence, CASE WHEN (lovia_messages.entry_type = :entry_type_1) THEN lovia_messages.entry_json END AS anon_1
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :sid ORDER BY lovia_messages.sequence;
-- values: entry_type_1='entries'

-- lovia_store.sessions.fork:_RUN_STARTS (prepared)
SELECT lovia_session_runs.run_id, lovia_session_runs.first_sequence
FROM lovia_session_runs
WHERE lovia_session_runs.tenant = :tenant AND lovia_session_runs.session_id = :new;

-- lovia_store.sessions.fork:_SEQUENCES (prepared)
SELECT lovia_messages.sequence
FROM lovia_messages
WHERE lovia_messages.tenant = :tenant AND lovia_messages.session_id = :new ORDER BY lovia_messages.sequence;

-- lovia_store.sessions.fork:_SNAPSHOT_BOUNDS (prepared)
SELECT lovia_snapshots.version, lovia_snapshots.compacted_through_sequence
FROM lovia_snapshots
WHERE lovia_snapshots.tenant = :tenant AND lovia_snapshots.session_id = :new;
