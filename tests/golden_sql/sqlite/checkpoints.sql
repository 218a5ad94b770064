-- Golden SQL, sqlite: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.checkpoints.sql:_DELETE_DOCUMENTS_IN_ONE_STATEMENT
-- not run on sqlite (runs where: one_statement_writes)

-- lovia_store.checkpoints.sql:_DELETE_EFFECTS
DELETE FROM lovia_tool_effects WHERE lovia_tool_effects.tenant = :tenant AND lovia_tool_effects.run_id IN (__[POSTCOMPILE_run_ids]);

-- lovia_store.checkpoints.sql:_DELETE_ENTRIES
DELETE FROM lovia_run_entries WHERE lovia_run_entries.tenant = :tenant AND lovia_run_entries.run_id IN (__[POSTCOMPILE_heads]);

-- lovia_store.checkpoints.sql:_DELETE_HEADS
DELETE FROM lovia_run_heads WHERE lovia_run_heads.tenant = :tenant AND lovia_run_heads.run_id IN (__[POSTCOMPILE_heads]);

-- lovia_store.checkpoints.sql:_EFFECTS
SELECT lovia_tool_effects.call_id, lovia_tool_effects.tool_name, lovia_tool_effects.started_at, lovia_tool_effects.result_json
FROM lovia_tool_effects
WHERE lovia_tool_effects.tenant = :tenant AND lovia_tool_effects.run_id = :run_id;

-- lovia_store.checkpoints.sql:_ENTRIES
SELECT lovia_run_entries.entry_json
FROM lovia_run_entries
WHERE lovia_run_entries.tenant = :tenant AND lovia_run_entries.run_id = :run_id ORDER BY lovia_run_entries.position;

-- lovia_store.checkpoints.sql:_HEAD
SELECT lovia_run_heads.head_json
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant AND lovia_run_heads.run_id = :run_id;

-- lovia_store.checkpoints.sql:_LOCK_HEADS
SELECT lovia_run_heads.run_id
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant AND lovia_run_heads.run_id IN (__[POSTCOMPILE_run_ids]) ORDER BY lovia_run_heads.run_id;

-- lovia_store.checkpoints.sql:_RECORD_OUTCOME (prepared)
UPDATE lovia_tool_effects SET result_json=:result WHERE lovia_tool_effects.tenant = :effect_tenant AND lovia_tool_effects.run_id = :effect_run AND lovia_tool_effects.call_id = :effect_call AND (lovia_tool_effects.result_json IS NULL OR (lovia_tool_effects.result_json NOT LIKE :result_json_1 || '%' ESCAPE '/'));
-- values: result_json_1='\x01r'

-- lovia_store.checkpoints.sql:_REFERENCING_EFFECTS
SELECT lovia_tool_effects.result_json
FROM lovia_tool_effects
WHERE lovia_tool_effects.tenant = :tenant AND lovia_tool_effects.run_id IN (__[POSTCOMPILE_run_ids]) AND (lovia_tool_effects.result_json LIKE :result_json_1 || '%' ESCAPE '/');
-- values: result_json_1='\x01r'

-- lovia_store.checkpoints.sql:_REFERENCING_ENTRIES
SELECT lovia_run_entries.entry_json
FROM lovia_run_entries
WHERE lovia_run_entries.tenant = :tenant AND lovia_run_entries.run_id IN (__[POSTCOMPILE_heads]) AND (lovia_run_entries.entry_json LIKE :entry_json_1 || '%' ESCAPE '/');
-- values: entry_json_1='\x01r'

-- lovia_store.checkpoints.sql:_REPLACED_OUTCOME
SELECT lovia_tool_effects.result_json
FROM lovia_tool_effects
WHERE lovia_tool_effects.tenant = :effect_tenant AND lovia_tool_effects.run_id = :effect_run AND lovia_tool_effects.call_id = :effect_call;

-- lovia_store.checkpoints.sql:_REPLACE_OUTCOME (prepared)
UPDATE lovia_tool_effects SET result_json=:result WHERE lovia_tool_effects.tenant = :effect_tenant AND lovia_tool_effects.run_id = :effect_run AND lovia_tool_effects.call_id = :effect_call;

-- lovia_store.checkpoints.sql_steps:ENTRY_COUNT (prepared)
SELECT lovia_run_heads.entry_count
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant AND lovia_run_heads.run_id = :run_id;

-- lovia_store.checkpoints.sql_steps:_APPEND_IN_ONE_STATEMENT (prepared)
-- not run on sqlite (runs where: one_statement_writes)

-- lovia_store.checkpoints.sql_steps:_APPEND_LINKING_IN_ONE_STATEMENT (prepared)
-- not run on sqlite (runs where: one_statement_writes)

-- lovia_store.checkpoints.sql_steps:_INSERT_ENTRIES (prepared)
INSERT INTO lovia_run_entries (tenant, run_id, position, entry_json) VALUES (:tenant, :run_id, :position, :entry_json);

-- lovia_store.checkpoints.sql_steps:_LOCKED_HEAD
SELECT lovia_run_heads.head_json, lovia_run_heads.entry_count
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = :tenant AND lovia_run_heads.run_id = :run_id;

-- lovia_store.checkpoints.sql_steps:_TAIL
SELECT lovia_run_entries.entry_json
FROM lovia_run_entries
WHERE lovia_run_entries.tenant = :tenant AND lovia_run_entries.run_id = :run_id AND lovia_run_entries.position > :after ORDER BY lovia_run_entries.position;

-- lovia_store.checkpoints.sql_steps:_upsert(dialect, links_session=False) (prepared)
INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant, :run_id, :status, :head_json, :count, :now, :now, :session_id) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status, head_json = :head_json, entry_count = (lovia_run_heads.entry_count + :count), updated_at = :now RETURNING entry_count;

-- lovia_store.checkpoints.sql_steps:_upsert(dialect, links_session=True) (prepared)
INSERT INTO lovia_run_heads (tenant, run_id, status, head_json, entry_count, created_at, updated_at, session_id) VALUES (:tenant, :run_id, :status, :head_json, :count, :now, :now, :session_id) ON CONFLICT (tenant, run_id) DO UPDATE SET status = :status, head_json = :head_json, entry_count = (lovia_run_heads.entry_count + :count), updated_at = :now, session_id = :session_id RETURNING entry_count;
