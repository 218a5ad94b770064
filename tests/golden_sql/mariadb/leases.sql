-- Golden SQL, mariadb: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.checkpoints.sql_leases:_CURRENT
SELECT lovia_run_leases.token, lovia_run_leases.lease_id, lovia_run_leases.holder, lovia_run_leases.expires_ms
FROM lovia_run_leases
WHERE lovia_run_leases.tenant = :tenant AND lovia_run_leases.run_id = :run_id FOR UPDATE;

-- lovia_store.checkpoints.sql_leases:_EXPIRES
SELECT lovia_run_leases.expires_ms
FROM lovia_run_leases
WHERE lovia_run_leases.tenant = :tenant AND lovia_run_leases.run_id = :run_id;

-- lovia_store.checkpoints.sql_leases:_FORGET
DELETE FROM lovia_run_leases WHERE lovia_run_leases.tenant = :held_tenant AND lovia_run_leases.run_id = :held_run AND lovia_run_leases.token = :held_token AND lovia_run_leases.lease_id = :held_id AND NOT (EXISTS (SELECT *
FROM lovia_run_heads
WHERE lovia_run_heads.tenant = lovia_run_leases.tenant AND lovia_run_heads.run_id = lovia_run_leases.run_id));

-- lovia_store.checkpoints.sql_leases:_NOW
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS anon_1;

-- lovia_store.checkpoints.sql_leases:_RELEASE
UPDATE lovia_run_leases SET expires_ms=:expires_ms WHERE lovia_run_leases.tenant = :held_tenant AND lovia_run_leases.run_id = :held_run AND lovia_run_leases.token = :held_token AND lovia_run_leases.lease_id = :held_id;
-- values: expires_ms=0

-- lovia_store.checkpoints.sql_leases:_RENEW
-- not run on mariadb (runs where: returning)

-- lovia_store.checkpoints.sql_leases:_RENEW_NO_RETURNING
UPDATE lovia_run_leases SET expires_ms=(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 + :ttl_ms) WHERE lovia_run_leases.tenant = :held_tenant AND lovia_run_leases.run_id = :held_run AND lovia_run_leases.token = :held_token AND lovia_run_leases.lease_id = :held_id;
