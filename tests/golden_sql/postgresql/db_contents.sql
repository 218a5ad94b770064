-- Golden SQL, postgresql: rendered by tests/test_golden_sql.py, do not edit.
-- After changing a statement: python tests/test_golden_sql.py --update

-- lovia_store.db.contents:_COUNT (prepared)
UPDATE lovia_contents SET refs=(lovia_contents.refs + :count::BIGINT) WHERE lovia_contents.tenant = :tenant::VARCHAR AND lovia_contents.digest = :digest::VARCHAR;

-- lovia_store.db.contents:_DROP_UNREFERENCED (prepared)
DELETE FROM lovia_contents WHERE lovia_contents.tenant = :tenant::VARCHAR AND lovia_contents.digest = :digest::VARCHAR AND lovia_contents.refs <= :refs_1::BIGINT;
-- values: refs_1=0
