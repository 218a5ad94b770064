-- Golden SQL, sqlite: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.db.dialect:_insert_ignore(run_leases) (prepared)
INSERT INTO lovia_run_leases (tenant, run_id, token, lease_id, holder, expires_ms) VALUES (:tenant, :run_id, :token, :lease_id, :holder, :expires_ms) ON CONFLICT DO NOTHING;

-- lovia_store.db.dialect:_insert_ignore(session_runs) (prepared)
INSERT INTO lovia_session_runs (tenant, session_id, run_id, position, first_sequence, entry_count, meta_json, created_at) VALUES (:tenant, :session_id, :run_id, :position, :first_sequence, :entry_count, :meta_json, :created_at) ON CONFLICT DO NOTHING;

-- lovia_store.db.dialect:_insert_ignore(tool_effects) (prepared)
INSERT INTO lovia_tool_effects (tenant, run_id, call_id, tool_name, started_at, result_json) VALUES (:tenant, :run_id, :call_id, :tool_name, :started_at, :result_json) ON CONFLICT DO NOTHING;
