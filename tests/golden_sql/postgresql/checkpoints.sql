-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.checkpoints.sql:_DELETE_DOCUMENTS_IN_ONE_STATEMENT
WITH gone_entries AS
(DELETE FROM lovia_run_entries WHERE lovia_run_entries.tenant = :tenant::VARCHAR AND lovia_run_entries.run_id IN (__[POSTCOMPILE_heads]) RETURNING lovia_run_entries.entry_json AS document),
gone_effects AS
(DELETE FROM lovia_tool_effects WHERE lovia_tool_effects.tenant = :tenant::VARCHAR AND lovia_tool_effects.run_id IN (__[POSTCOMPILE_run_ids]) RETURNING lovia_tool_effects.result_json AS document)
 SELECT gone_entries.document
FROM gone_entries
WHERE (gone_entries.document LIKE :document_1::VARCHAR || '%' ESCAPE '/') UNION ALL SELECT gone_effects.document
FROM gone_effects
WHERE (gone_effects.document LIKE :document_2::VARCHAR || '%' ESCAPE '/');
-- values: document_1='\x01r', document_2='\x01r'

-- lovia_store.checkpoints.sql:_DELETE_EFFECTS
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.checkpoints.sql:_DELETE_ENTRIES
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.checkpoints.sql:_DELETE_HEADS
DELETE FROM lovia_run_heads WHERE lovia_run_heads.tenant = :tenant::VARCHAR AND lovia_run_heads.run_id IN (__[POSTCOMPILE_heads]);

-- lovia_store.checkpoints.sql:_EFFECTS
SELECT lovia_tool_effects.call_id, lovia_tool_effects.tool_name, lovia_tool_effects.started_at, lovia_tool_effects.result_json
FROM lovia_tool_effects
WHERE lovia_tool_effects.tenant = :tenant::VARCHAR AND lovia_tool_effects.run_id = :run_id::VARCHAR;

-- lovia_store.checkpoints.sql:_ENTRIES
SELECT lovia_run_entries.entry_json
FROM lovia_run_entries
WHERE lovia_run_entries.tenant = :tenant::VARCHAR AND lovia_run_entries.run_id = :run_id::VARCHAR ORDER BY lovia_run_entries.position;

-- lovia_store.checkpoints.sql:_HEAD
SELECT lovia_run_heads.head_json
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant::VARCHAR AND lovia_run_heads.run_id = :run_id::VARCHAR;

-- lovia_store.checkpoints.sql:_LOCK_HEADS
SELECT lovia_run_heads.run_id
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant::VARCHAR AND lovia_run_heads.run_id IN (__[POSTCOMPILE_run_ids]) ORDER BY lovia_run_heads.run_id FOR UPDATE;

-- lovia_store.checkpoints.sql:_RECORD_OUTCOME (prepared)
UPDATE lovia_tool_effects SET result_json=:result::VARCHAR WHERE lovia_tool_effects.tenant = :effect_tenant::VARCHAR AND lovia_tool_effects.run_id = :effect_run::VARCHAR AND lovia_tool_effects.call_id = :effect_call::VARCHAR AND (lovia_tool_effects.result_json IS NULL OR (lovia_tool_effects.result_json NOT LIKE :result_json_1::VARCHAR || '%' ESCAPE '/'));
-- values: result_json_1='\x01r'

-- lovia_store.checkpoints.sql:_REFERENCING_EFFECTS
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.checkpoints.sql:_REFERENCING_ENTRIES
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.checkpoints.sql:_REPLACED_OUTCOME
SELECT lovia_tool_effects.result_json
FROM lovia_tool_effects
WHERE lovia_tool_effects.tenant = :effect_tenant::VARCHAR AND lovia_tool_effects.run_id = :effect_run::VARCHAR AND lovia_tool_effects.call_id = :effect_call::VARCHAR FOR UPDATE;

-- lovia_store.checkpoints.sql:_REPLACE_OUTCOME (prepared)
UPDATE lovia_tool_effects SET result_json=:result::VARCHAR WHERE lovia_tool_effects.tenant = :effect_tenant::VARCHAR AND lovia_tool_effects.run_id = :effect_run::VARCHAR AND lovia_tool_effects.call_id = :effect_call::VARCHAR;

-- lovia_store.checkpoints.sql_steps:ENTRY_COUNT (prepared)
SELECT lovia_run_heads.entry_count
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant::VARCHAR AND lovia_run_heads.run_id = :run_id::VARCHAR;

-- lovia_store.checkpoints.sql_steps:_APPEND_IN_ONE_STATEMENT (prepared)
WITH head AS
(INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :status::VARCHAR, :head_json::VARCHAR, :count::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE, :session_id::VARCHAR) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status::VARCHAR, head_json = :head_json::VARCHAR, entry_count = (lovia_run_heads.entry_count + :count::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE RETURNING lovia_run_heads.entry_count),
entries AS
(INSERT INTO lovia_run_entries (tenant, run_id, position, entry_json) SELECT :tenant::VARCHAR AS anon_1, :run_id::VARCHAR AS anon_2, (head.entry_count - :count::BIGINT) + given.ordinality AS anon_3, given.entry_json AS entry_json
FROM head JOIN unnest(:documents::TEXT[]) WITH ORDINALITY AS given(entry_json, ordinality) ON true)
 SELECT head.entry_count
FROM head;

-- lovia_store.checkpoints.sql_steps:_APPEND_LINKING_IN_ONE_STATEMENT (prepared)
WITH head AS
(INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :status::VARCHAR, :head_json::VARCHAR, :count::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE, :session_id::VARCHAR) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status::VARCHAR, head_json = :head_json::VARCHAR, entry_count = (lovia_run_heads.entry_count + :count::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE, session_id = :session_id::VARCHAR RETURNING lovia_run_heads.entry_count),
entries AS
(INSERT INTO lovia_run_entries (tenant, run_id, position, entry_json) SELECT :tenant::VARCHAR AS anon_1, :run_id::VARCHAR AS anon_2, (head.entry_count - :count::BIGINT) + given.ordinality AS anon_3, given.entry_json AS entry_json
FROM head JOIN unnest(:documents::TEXT[]) WITH ORDINALITY AS given(entry_json, ordinality) ON true)
 SELECT head.entry_count
FROM head;

-- lovia_store.checkpoints.sql_steps:_INSERT_ENTRIES (prepared)
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.checkpoints.sql_steps:_LOCKED_HEAD
SELECT lovia_run_heads.head_json, lovia_run_heads.entry_count
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant::VARCHAR AND lovia_run_heads.run_id = :run_id::VARCHAR FOR UPDATE;

-- lovia_store.checkpoints.sql_steps:_TAIL
SELECT lovia_run_entries.entry_json
FROM lovia_run_entries
WHERE lovia_run_entries.tenant = :tenant::VARCHAR AND lovia_run_entries.run_id = :run_id::VARCHAR AND lovia_run_entries.position > :after::BIGINT ORDER BY lovia_run_entries.position;

-- lovia_store.checkpoints.sql_steps:_upsert(dialect, links_session=False) (prepared)
INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :status::VARCHAR, :head_json::VARCHAR, :count::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE, :session_id::VARCHAR) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status::VARCHAR, head_json = :head_json::VARCHAR, entry_count = (lovia_run_heads.entry_count + :count::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE RETURNING lovia_run_heads.entry_count;

-- lovia_store.checkpoints.sql_steps:_upsert(dialect, links_session=True) (prepared)
INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :status::VARCHAR, :head_json::VARCHAR, :count::BIGINT, :now::TIMESTAMP WITH TIME ZONE, :now::TIMESTAMP WITH TIME ZONE, :session_id::VARCHAR) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status::VARCHAR, head_json = :head_json::VARCHAR, entry_count = (lovia_run_heads.entry_count + :count::BIGINT), updated_at = :now::TIMESTAMP WITH TIME ZONE, session_id = :session_id::VARCHAR RETURNING lovia_run_heads.entry_count;
