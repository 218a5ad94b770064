-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.db.dialect:_insert_ignore(run_leases) (prepared)
INSERT INTO lovia_run_leases (tenant, run_id, token, lease_id, holder, expires_ms) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :token::BIGINT, :lease_id::VARCHAR, :holder::VARCHAR, :expires_ms::BIGINT) ON CONFLICT DO NOTHING;

-- lovia_store.db.dialect:_insert_ignore(session_runs)
-- not run on postgresql (runs where: not one_statement_writes)

-- lovia_store.db.dialect:_insert_ignore(tool_effects) (prepared)
INSERT INTO lovia_tool_effects (tenant, run_id, call_id, tool_name, started_at, result_json) VALUES (:tenant::VARCHAR, :run_id::VARCHAR, :call_id::VARCHAR, :tool_name::VARCHAR, :started_at::TIMESTAMP WITH TIME ZONE, :result_json::VARCHAR) ON CONFLICT DO NOTHING;
