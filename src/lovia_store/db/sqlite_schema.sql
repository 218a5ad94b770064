-- lovia_store.db.tables' CREATE statements compiled for SQLite: what a new file gets in
-- one step (lovia_store.db.schema._create_current), compiled ahead. Do not edit: written
-- by `python tests/test_schema_drift.py --update`, which tests/test_schema_drift.py runs.

CREATE TABLE lovia_contents (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	digest VARCHAR(64) NOT NULL,
	refs BIGINT NOT NULL,
	size BIGINT NOT NULL,
	data BLOB NOT NULL,
	CONSTRAINT pk_lovia_contents PRIMARY KEY (tenant, digest)
);

CREATE TABLE lovia_run_heads (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	run_id VARCHAR(255) NOT NULL,
	status VARCHAR(16) NOT NULL,
	head_json TEXT NOT NULL,
	entry_count BIGINT DEFAULT '0' NOT NULL,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	session_id VARCHAR(255),
	CONSTRAINT pk_lovia_run_heads PRIMARY KEY (tenant, run_id)
);

CREATE INDEX ix_lovia_run_heads_tenant_session_id ON lovia_run_heads (tenant, session_id);

CREATE INDEX ix_lovia_run_heads_tenant_status_updated_at ON lovia_run_heads (tenant, status, updated_at);

CREATE TABLE lovia_run_leases (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	run_id VARCHAR(255) NOT NULL,
	token BIGINT NOT NULL,
	lease_id VARCHAR(32) NOT NULL,
	holder VARCHAR(255) NOT NULL,
	expires_ms BIGINT NOT NULL,
	CONSTRAINT pk_lovia_run_leases PRIMARY KEY (tenant, run_id)
);

CREATE TABLE lovia_schema (
	store VARCHAR(64) NOT NULL,
	version INTEGER NOT NULL,
	CONSTRAINT pk_lovia_schema PRIMARY KEY (store)
);

CREATE TABLE lovia_sessions (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	session_id VARCHAR(255) NOT NULL,
	parent_session_id VARCHAR(255),
	session_type INTEGER DEFAULT '0' NOT NULL,
	title VARCHAR(200),
	agent_name VARCHAR(64),
	last_sequence BIGINT DEFAULT '0' NOT NULL,
	message_count BIGINT DEFAULT '0' NOT NULL,
	run_count BIGINT DEFAULT '0' NOT NULL,
	snapshot_version INTEGER DEFAULT '0' NOT NULL,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	forked_from_session_id VARCHAR(255),
	forked_at_entry BIGINT,
	CONSTRAINT pk_lovia_sessions PRIMARY KEY (tenant, session_id)
);

CREATE INDEX ix_lovia_sessions_tenant_parent_session_id ON lovia_sessions (tenant, parent_session_id);

CREATE INDEX ix_lovia_sessions_tenant_updated_at_session_id ON lovia_sessions (tenant, updated_at, session_id);

CREATE TABLE lovia_tool_effects (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	run_id VARCHAR(255) NOT NULL,
	call_id VARCHAR(255) NOT NULL,
	tool_name VARCHAR(255) NOT NULL,
	started_at DATETIME NOT NULL,
	result_json TEXT,
	CONSTRAINT pk_lovia_tool_effects PRIMARY KEY (tenant, run_id, call_id)
);

CREATE TABLE lovia_messages (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	session_id VARCHAR(255) NOT NULL,
	sequence BIGINT NOT NULL,
	request_id VARCHAR(255) NOT NULL,
	run_id VARCHAR(255),
	entry_type VARCHAR(32) NOT NULL,
	call_id VARCHAR(255),
	entry_json TEXT NOT NULL,
	envelope_json TEXT,
	metadata_json TEXT,
	tags_json TEXT,
	started_at DATETIME,
	completed_at DATETIME,
	duration_ns BIGINT,
	reasoning_started_at DATETIME,
	reasoning_completed_at DATETIME,
	reasoning_duration_ns BIGINT,
	content_started_at DATETIME,
	content_completed_at DATETIME,
	content_duration_ns BIGINT,
	input_tokens BIGINT,
	output_tokens BIGINT,
	cache_read_tokens BIGINT,
	cache_write_tokens BIGINT,
	reasoning_tokens BIGINT,
	message_id VARCHAR(64),
	idempotency_key VARCHAR(255),
	created_at DATETIME NOT NULL,
	updated_at DATETIME,
	CONSTRAINT pk_lovia_messages PRIMARY KEY (tenant, session_id, sequence),
	CONSTRAINT fk_lovia_messages_tenant_lovia_sessions FOREIGN KEY(tenant, session_id) REFERENCES lovia_sessions (tenant, session_id)
);

CREATE UNIQUE INDEX ix_lovia_messages_tenant_session_id_idempotency_key ON lovia_messages (tenant, session_id, idempotency_key);

CREATE TABLE lovia_run_entries (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	run_id VARCHAR(255) NOT NULL,
	position BIGINT NOT NULL,
	entry_json TEXT NOT NULL,
	CONSTRAINT pk_lovia_run_entries PRIMARY KEY (tenant, run_id, position),
	CONSTRAINT fk_lovia_run_entries_tenant_lovia_run_heads FOREIGN KEY(tenant, run_id) REFERENCES lovia_run_heads (tenant, run_id)
);

CREATE TABLE lovia_session_runs (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	session_id VARCHAR(255) NOT NULL,
	run_id VARCHAR(255) NOT NULL,
	position BIGINT NOT NULL,
	first_sequence BIGINT NOT NULL,
	entry_count BIGINT NOT NULL,
	meta_json TEXT,
	created_at DATETIME NOT NULL,
	CONSTRAINT pk_lovia_session_runs PRIMARY KEY (tenant, session_id, run_id),
	CONSTRAINT fk_lovia_session_runs_tenant_lovia_sessions FOREIGN KEY(tenant, session_id) REFERENCES lovia_sessions (tenant, session_id)
);

CREATE INDEX ix_lovia_session_runs_tenant_session_id_position ON lovia_session_runs (tenant, session_id, position);

CREATE TABLE lovia_snapshots (
	tenant VARCHAR(64) DEFAULT '' NOT NULL,
	session_id VARCHAR(255) NOT NULL,
	version INTEGER NOT NULL,
	snapshot_id VARCHAR(64) NOT NULL,
	compacted_through_sequence BIGINT NOT NULL,
	summary_json TEXT NOT NULL,
	envelope_json TEXT,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	CONSTRAINT pk_lovia_snapshots PRIMARY KEY (tenant, session_id, version),
	CONSTRAINT fk_lovia_snapshots_tenant_lovia_sessions FOREIGN KEY(tenant, session_id) REFERENCES lovia_sessions (tenant, session_id)
);

