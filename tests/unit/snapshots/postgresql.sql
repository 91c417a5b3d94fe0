-- add_purger: Purger ``b_name``'s row, where a database lacks it (its tables were copied without
INSERT INTO relay_purger (name) SELECT %(b_name)s::VARCHAR AS anon_1
WHERE NOT (EXISTS (SELECT relay_purger.name
FROM relay_purger
WHERE relay_purger.name = %(b_name)s::VARCHAR));

-- advance: Move key ``b_key``'s progress from ``b_from`` to ``b_to`` (executemany).
UPDATE outbox_progress SET sent_seq=%(b_to)s::BIGINT WHERE outbox_progress.ordering_key = %(b_key)s::VARCHAR AND outbox_progress.sent_seq = %(b_from)s::BIGINT;

-- advisory_lock: ``pg_try_advisory_xact_lock(key)``: true when this transaction took lock ``key``.
SELECT pg_try_advisory_xact_lock(%(key)s::BIGINT) AS pg_try_advisory_xact_lock_1;

-- audit_page: Audit rows, newest first, from just before ``after`` (keyset by id).
SELECT relay_audit.id, relay_audit.at, relay_audit.actor, relay_audit.role, relay_audit.via, relay_audit.action, relay_audit.status, relay_audit.selector, relay_audit.matched, relay_audit.changed
FROM relay_audit
WHERE relay_audit.id < %(id_1)s::BIGINT ORDER BY relay_audit.id DESC
 LIMIT %(param_1)s::INTEGER;

-- autovacuum_settings: Whether autovacuum can clean ``outbox``: the server's ``autovacuum`` and
SELECT current_setting('autovacuum') AS server, current_setting('track_counts') AS track_counts, (SELECT option_value FROM pg_options_to_table((SELECT reloptions FROM pg_class WHERE oid = to_regclass('outbox'))) WHERE option_name = 'autovacuum_enabled') AS outbox;

-- backend_pid: This session's server process (the doctor tells a transaction pooler by it).
SELECT pg_backend_pid() AS pg_backend_pid_1;

-- backlog: How many unordered rows and heads of keys are claimable now, counting each no
SELECT (SELECT count(*) AS count_1
FROM (SELECT anon_3.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_until < now() AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT %(param_4)s::INTEGER) AS anon_3 UNION ALL SELECT anon_4.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_5)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_6)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_7)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_8)s::INTEGER) AS anon_4 ORDER BY id
 LIMIT %(param_9)s::INTEGER) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT o.id AS id
FROM outbox_progress JOIN LATERAL (SELECT outbox.id AS id, outbox.ordering_key AS ordering_key, outbox.seq AS seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + %(sent_seq_1)s::BIGINT AND outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND outbox.event_type != ALL (CAST(%(param_10)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_11)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_12)s::VARCHAR AS TEXT[])))
 LIMIT %(param_13)s::INTEGER) AS o ON true
 LIMIT %(param_14)s::INTEGER) AS anon_5) AS anon_1;

-- backlog[expired=False]: How many unordered rows and heads of keys are claimable now, counting each no
SELECT (SELECT count(*) AS count_1
FROM (SELECT anon_3.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_4)s::INTEGER) AS anon_3) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT o.id AS id
FROM outbox_progress JOIN LATERAL (SELECT outbox.id AS id, outbox.ordering_key AS ordering_key, outbox.seq AS seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + %(sent_seq_1)s::BIGINT AND outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND outbox.event_type != ALL (CAST(%(param_5)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_6)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_7)s::VARCHAR AS TEXT[])))
 LIMIT %(param_8)s::INTEGER) AS o ON true
 LIMIT %(param_9)s::INTEGER) AS anon_4) AS anon_1;

-- beat_ages: Each heartbeat's name and seconds since it beat.
SELECT relay_heartbeats.name, CAST(EXTRACT(epoch FROM now() - relay_heartbeats.beat_at) AS FLOAT) AS anon_1
FROM relay_heartbeats;

-- beat_insert: Heartbeat ``b_name``'s first row, at the database's now.
INSERT INTO relay_heartbeats (name, beat_at) VALUES (%(b_name)s::VARCHAR, now());

-- beat_update: Set heartbeat ``b_name``'s time to the database's now (0 rows: not there yet).
UPDATE relay_heartbeats SET beat_at=now() WHERE relay_heartbeats.name = %(b_name)s::VARCHAR;

-- bucket: The bucket named ``b_name``: its tokens and the seconds since it was last refilled,
SELECT relay_rate_buckets.tokens, CAST(EXTRACT(epoch FROM now() - relay_rate_buckets.refilled_at) AS FLOAT) AS elapsed
FROM relay_rate_buckets
WHERE relay_rate_buckets.name = %(b_name)s::VARCHAR FOR UPDATE SKIP LOCKED;

-- bucket_exists: Whether the bucket ``b_name`` exists (unlocked: a locked one is another claim's).
SELECT relay_rate_buckets.name
FROM relay_rate_buckets
WHERE relay_rate_buckets.name = %(b_name)s::VARCHAR;

-- bury: Rows that failed their last attempt become ``failed`` (executemany: ``b_id``,
UPDATE outbox SET status='failed', locked_until=NULL, last_error=%(b_error)s::VARCHAR, updated_at=now() WHERE outbox.id = %(b_id)s::BIGINT AND outbox.attempt = %(b_attempt)s::INTEGER AND outbox.status = 'processing' AND outbox.locked_by = %(b_worker)s::VARCHAR;

-- claim_statement: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + %(attempt_1)s::INTEGER), locked_by=%(locked_by)s::VARCHAR, locked_until=(now() + %(lease_seconds)s * interval '1 second'), updated_at=now() WHERE outbox.id = ANY (array((SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, anon_3.size AS size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, %(coalesce_2)s::VARCHAR) = 'processing' AND outbox.locked_until < now() AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT %(param_4)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_3 UNION ALL SELECT anon_4.id AS id, anon_4.size AS size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_5)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_6)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_7)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_8)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_4 ORDER BY id
 LIMIT %(param_9)s::INTEGER) AS anon_2) AS anon_1
WHERE anon_1.upto <= %(max_bytes)s::BIGINT OR anon_1.upto = anon_1.size AND %(first_anyway)s))) RETURNING outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.attempt, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND outbox.expires_at <= now() AS expired, CASE WHEN (CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END ELSE NULL END AS expires_at;

-- claim_statement[expired=False]: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + %(attempt_1)s::INTEGER), locked_by=%(locked_by)s::VARCHAR, locked_until=(now() + %(lease_seconds)s * interval '1 second'), updated_at=now() WHERE outbox.id = ANY (array((SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, anon_3.size AS size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_4)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_3) AS anon_2) AS anon_1
WHERE anon_1.upto <= %(max_bytes)s::BIGINT OR anon_1.upto = anon_1.size AND %(first_anyway)s))) RETURNING outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.attempt, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND outbox.expires_at <= now() AS expired, CASE WHEN (CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END ELSE NULL END AS expires_at;

-- claim_statement[sized_late=True]: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + %(attempt_1)s::INTEGER), locked_by=%(locked_by)s::VARCHAR, locked_until=(now() + %(lease_seconds)s * interval '1 second'), updated_at=now() WHERE outbox.id = ANY (array((SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, (SELECT octet_length(CAST(sized_row.payload AS TEXT)) + coalesce(octet_length(CAST(sized_row.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS anon_4
FROM outbox AS sized_row
WHERE sized_row.id = anon_3.id) AS size
FROM (SELECT anon_5.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, %(coalesce_2)s::VARCHAR) = 'processing' AND outbox.locked_until < now() AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT %(param_4)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_5 UNION ALL SELECT anon_6.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_5)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_6)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_7)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_8)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_6 ORDER BY id
 LIMIT %(param_9)s::INTEGER) AS anon_3
 LIMIT ALL OFFSET %(param_10)s::INTEGER) AS anon_2) AS anon_1
WHERE anon_1.upto <= %(max_bytes)s::BIGINT OR anon_1.upto = anon_1.size AND %(first_anyway)s))) RETURNING outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.attempt, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND outbox.expires_at <= now() AS expired, CASE WHEN (CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END ELSE NULL END AS expires_at;

-- clock_reading: The database's clock, as an aware UTC timestamp (the doctor's skew check).
SELECT now() AS now_1;

-- connection_tls: Whether this session is encrypted, and with which TLS version (``relay doctor``).
SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid();

-- count_by_status: Rows per unsent status, and every row as ``total`` (sent = total - the rest): the
SELECT outbox.status, count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') GROUP BY outbox.status UNION ALL SELECT 'total', count(*) AS count_2
FROM outbox;

-- count_matching: How many rows ``matching`` selects.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- count_sent: Add ``b_sent`` events to this minute's count in shard ``b_shard``, with their lag
INSERT INTO outbox_sent_counts (minute, shard, sent, lag_sum, lag_max) VALUES (CAST(floor(extract(epoch from now()) / CAST(%(param_1)s::INTEGER AS NUMERIC)) AS BIGINT), %(b_shard)s::INTEGER, %(b_sent)s::BIGINT, (%(b_sent)s::BIGINT * extract(epoch from now()) - %(b_created_sum)s), (extract(epoch from now()) - %(b_created_min)s)) ON CONFLICT (minute, shard) DO UPDATE SET sent = (outbox_sent_counts.sent + excluded.sent), lag_sum = (outbox_sent_counts.lag_sum + excluded.lag_sum), lag_max = greatest(outbox_sent_counts.lag_max, excluded.lag_max) RETURNING outbox_sent_counts.minute;

-- count_stalled: How many keys are stalled, counted up to ``limit``.
SELECT count(*) AS count_1
FROM (SELECT k.ordering_key AS ordering_key, k.sent_seq AS sent_seq, k.id AS id, k.status AS status, k.last_error AS last_error, k.last_seq AS last_seq
FROM (SELECT outbox_progress.ordering_key AS ordering_key, outbox_progress.sent_seq AS sent_seq, h.id AS id, h.status AS status, h.last_error AS last_error, top.seq AS last_seq
FROM outbox_progress LEFT OUTER JOIN LATERAL (SELECT outbox.id AS id, outbox.status AS status, outbox.last_error AS last_error
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + %(sent_seq_1)s::BIGINT
 LIMIT %(param_1)s::INTEGER) AS h ON true LEFT OUTER JOIN LATERAL (SELECT outbox.seq AS seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq IS NOT NULL ORDER BY outbox.seq DESC
 LIMIT %(param_2)s::INTEGER) AS top ON true) AS k
WHERE k.id IS NULL AND k.last_seq > k.sent_seq + %(sent_seq_2)s::BIGINT OR k.status IN ('failed', 'sent')
 LIMIT %(param_3)s::INTEGER) AS anon_1;

-- databases_inserted: Rows inserted so far in each database named in ``:names``, from the server's
SELECT datname, tup_inserted FROM pg_catalog.pg_stat_database WHERE datname = ANY(%(names)s);

-- databases_written: Rows inserted, updated or deleted so far in each database named in ``:names``: a
SELECT datname, tup_inserted + tup_updated + tup_deleted FROM pg_catalog.pg_stat_database WHERE datname = ANY(%(names)s);

-- delete_sent: Confirmed rows are deleted instead of marked sent, fenced as ``mark_sent``; bind
DELETE FROM outbox WHERE outbox.id = ANY (array((SELECT o.id
FROM unnest(CAST(%(ids)s::VARCHAR AS BIGINT[]), CAST(%(attempts)s::VARCHAR AS INTEGER[])) AS k(id, attempt) JOIN LATERAL (SELECT outbox.id AS id
FROM outbox
WHERE outbox.id = k.id AND outbox.attempt = k.attempt AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS o ON true))) AND outbox.locked_by = %(locked_by_2)s::VARCHAR;

-- delivery_lag: How late delivery is: seconds since the oldest due row among the first
SELECT CAST(EXTRACT(epoch FROM now() - (SELECT min(head.created_at) AS min_1
FROM (SELECT outbox.created_at AS created_at, outbox.next_retry_at AS next_retry_at
FROM outbox
WHERE outbox.status = 'pending' AND outbox.seq IS NULL ORDER BY outbox.id
 LIMIT %(param_1)s::INTEGER) AS head
WHERE head.next_retry_at IS NULL OR head.next_retry_at <= now())) AS FLOAT) AS anon_1;

-- end_run: Give purger ``b_name``'s lease back and record the run: ``b_behind`` rows left past
UPDATE relay_purger SET prev_behind_rows=relay_purger.behind_rows, behind_rows=%(b_behind)s::BIGINT, holder=NULL, expires_at=NULL, ran_at=now() WHERE relay_purger.name = %(b_name)s::VARCHAR AND relay_purger.holder = %(b_holder)s::VARCHAR;

-- event_details: Every column of the rows ``matching`` selects, JSON as stored text (one event's page).
SELECT outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.status, outbox.attempt, outbox.next_retry_at, outbox.locked_by, outbox.locked_until, outbox.last_error, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.updated_at, outbox.sent_at, outbox.seq, outbox.event_id, outbox.expires_at
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE ORDER BY outbox.id
 LIMIT %(param_2)s::INTEGER;

-- expired_leases: How many processing rows have an expired lease.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status = 'processing' AND outbox.locked_until < now();

-- expired_unordered: Leases that ran out, in the form the lane of expired leases reads them.
coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_until < now();

-- failed_places: Keys and numbers of the failed ordered rows ``matching`` selects: purging a failed
SELECT outbox.ordering_key, outbox.seq
FROM outbox
WHERE outbox.status = 'failed' AND outbox.seq IS NOT NULL AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- find: The pause bound as ``b_kind`` and ``b_value``, if in force.
SELECT relay_pauses.id
FROM relay_pauses
WHERE relay_pauses.kind = %(b_kind)s::VARCHAR AND relay_pauses.value = %(b_value)s::VARCHAR;

-- first_after: The lowest number of key ``b_key`` above ``b_after`` (a missing head's key: where
SELECT outbox.seq
FROM outbox
WHERE outbox.ordering_key = %(b_key)s::VARCHAR AND outbox.seq IS NOT NULL AND outbox.seq > %(b_after)s::BIGINT ORDER BY outbox.seq
 LIMIT %(param_1)s::INTEGER;

-- forget_counts: Drop the counts of minutes older than ``b_minutes`` minutes.
DELETE FROM outbox_sent_counts WHERE outbox_sent_counts.minute <= CAST(floor(extract(epoch from now()) / CAST(%(param_1)s::INTEGER AS NUMERIC)) AS BIGINT) - %(b_minutes)s::BIGINT;

-- gauges: Metrics' one read: capped counts per unfinished status and expired leases, oldest age.
SELECT (SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'pending'
 LIMIT %(param_1)s::INTEGER) AS anon_1) AS pending, (SELECT count(*) AS count_2
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'processing'
 LIMIT %(param_2)s::INTEGER) AS anon_2) AS processing, (SELECT count(*) AS count_3
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'failed'
 LIMIT %(param_3)s::INTEGER) AS anon_3) AS failed, (SELECT count(*) AS count_4
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'processing' AND outbox.locked_until < now()
 LIMIT %(param_4)s::INTEGER) AS anon_4) AS expired_leases, CAST(EXTRACT(epoch FROM now() - (SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'pending')) AS FLOAT) AS oldest_pending_age;

-- heads_statement: Claimable heads of their key (number ``sent_seq + 1``), oldest first, each locked by
SELECT o.id, o.ordering_key, o.seq, o.size
FROM outbox_progress JOIN LATERAL (SELECT outbox.id AS id, outbox.ordering_key AS ordering_key, outbox.seq AS seq, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + %(sent_seq_1)s::BIGINT AND outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[])))
 LIMIT %(param_4)s::INTEGER FOR UPDATE SKIP LOCKED) AS o ON true ORDER BY o.id
 LIMIT %(param_5)s::INTEGER;

-- held: Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`.
SELECT outbox.id
FROM outbox
WHERE outbox.id = ANY (array((SELECT o.id
FROM unnest(CAST(%(ids)s::VARCHAR AS BIGINT[]), CAST(%(attempts)s::VARCHAR AS INTEGER[])) AS k(id, attempt) JOIN LATERAL (SELECT outbox.id AS id
FROM outbox
WHERE outbox.id = k.id AND outbox.attempt = k.attempt AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS o ON true))) AND outbox.locked_by = %(locked_by_2)s::VARCHAR;

-- held_rows: How many pending rows ``hold`` holds back, counted no further than ``limit`` (a
SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status = 'pending' AND NOT (outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))))
 LIMIT %(param_4)s::INTEGER) AS anon_1;

-- id_sequence: The schema-qualified sequence behind ``outbox.id``, which the wake-up watches.
SELECT pg_get_serial_sequence(%(param_1)s, %(param_2)s::VARCHAR) AS pg_get_serial_sequence_1;

-- idle_in_transaction_timeout: ``SHOW idle_in_transaction_session_timeout`` (the doctor warns when it is off).
SHOW idle_in_transaction_session_timeout;

-- in_force: ``(kind, value)`` of every pause in force: what a relay holds back.
SELECT relay_pauses.kind, relay_pauses.value
FROM relay_pauses;

-- inbox_claim: ``INSERT … ON CONFLICT DO NOTHING RETURNING consumer``: a returned row tells that it
INSERT INTO relay_inbox (consumer, message_id) VALUES (%(consumer)s::VARCHAR, %(message_id)s::VARCHAR) ON CONFLICT DO NOTHING RETURNING relay_inbox.consumer;

-- inbox_delete: Delete the inbox rows whose ``(consumer, message_id)`` are bound as ``keys``.
DELETE FROM relay_inbox WHERE (relay_inbox.consumer, relay_inbox.message_id) IN (__[POSTCOMPILE_keys]);

-- inbox_oldest: Keys of up to ``limit`` inbox rows received more than ``older_than_seconds`` ago,
SELECT relay_inbox.consumer, relay_inbox.message_id
FROM relay_inbox
WHERE relay_inbox.received_at < now() + %(param_1)s * interval '1 second' ORDER BY relay_inbox.received_at
 LIMIT %(param_2)s::INTEGER;

-- inbox_purge: Delete the rows :meth:`inbox_oldest` selects, in one statement.
DELETE FROM relay_inbox WHERE (relay_inbox.consumer, relay_inbox.message_id) IN (SELECT relay_inbox.consumer, relay_inbox.message_id
FROM relay_inbox
WHERE relay_inbox.received_at < now() + %(param_1)s * interval '1 second' ORDER BY relay_inbox.received_at
 LIMIT %(param_2)s::INTEGER);

-- insert_event: One new event; bind its columns, ``delay_seconds`` when ``delayed`` (claimable that
INSERT INTO outbox (event_type, payload, headers, ordering_key, next_retry_at, expires_at) VALUES (%(event_type)s::VARCHAR, %(payload)s::JSONB, %(headers)s::JSONB, %(ordering_key)s::VARCHAR, (now() + %(delay_seconds)s * interval '1 second'), (now() + %(expires_seconds)s * interval '1 second')) RETURNING outbox.id;

-- lease_statement: Lease the rows bound as ``ids``, returning them.
UPDATE outbox SET status='processing', attempt=(outbox.attempt + %(attempt_1)s::INTEGER), locked_by=%(locked_by)s::VARCHAR, locked_until=(now() + %(lease_seconds)s * interval '1 second'), updated_at=now() WHERE outbox.id = ANY (CAST(%(ids)s::VARCHAR AS BIGINT[])) RETURNING outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.attempt, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND outbox.expires_at <= now() AS expired, CASE WHEN (CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END ELSE NULL END AS expires_at;

-- leases_by_holder: Processing rows per lease holder: how many, how many expired, first and last expiry.
SELECT outbox.locked_by, count(*) AS rows, sum(CASE WHEN (outbox.locked_until < now()) THEN %(param_1)s::INTEGER ELSE %(param_2)s::INTEGER END) AS expired, min(outbox.locked_until) AS first_expiry, max(outbox.locked_until) AS last_expiry
FROM outbox
WHERE outbox.status = 'processing' GROUP BY outbox.locked_by ORDER BY outbox.locked_by;

-- list_events: Rows ``matching`` selects, by id from just after ``after`` (keyset, never OFFSET).
SELECT outbox.id, outbox.event_type, outbox.ordering_key, outbox.status, outbox.attempt, outbox.last_error, outbox.locked_by, outbox.locked_until, outbox.next_retry_at, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.updated_at
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE AND outbox.id > %(id_2)s::BIGINT ORDER BY outbox.id
 LIMIT %(param_2)s::INTEGER;

-- listed: Every pause, oldest first, with its age in seconds on the database's clock.
SELECT relay_pauses.kind, relay_pauses.value, relay_pauses.reason, relay_pauses.paused_by, relay_pauses.paused_at, CAST(EXTRACT(epoch FROM now() - relay_pauses.paused_at) AS FLOAT) AS age_seconds
FROM relay_pauses ORDER BY relay_pauses.id;

-- mark_sent: Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...].
UPDATE outbox SET status='sent', locked_until=NULL, updated_at=now(), sent_at=now() WHERE outbox.id = ANY (array((SELECT o.id
FROM unnest(CAST(%(ids)s::VARCHAR AS BIGINT[]), CAST(%(attempts)s::VARCHAR AS INTEGER[])) AS k(id, attempt) JOIN LATERAL (SELECT outbox.id AS id
FROM outbox
WHERE outbox.id = k.id AND outbox.attempt = k.attempt AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS o ON true))) AND outbox.locked_by = %(locked_by_2)s::VARCHAR;

-- matching: The rows an operator's filter selects (``relay.store.operations.filters``).
outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- new_bucket: A bucket named ``b_name`` holding ``b_tokens``, refilled now.
INSERT INTO relay_rate_buckets (name, tokens) VALUES (%(b_name)s::VARCHAR, %(b_tokens)s);

-- new_xact_id: A new transaction id, the wake-up's horizon: every transaction with one is older.
SELECT CAST(CAST(pg_current_xact_id() AS text) AS bigint);

-- oldest_past_retention: Ids of the sent rows older than the retention among the ``limit`` oldest rows that
SELECT oldest.id
FROM (SELECT outbox.id AS id, outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT %(param_1)s::INTEGER) AS oldest
WHERE oldest.sent_at < now() + %(param_2)s * interval '1 second' AND oldest.status = 'sent';

-- oldest_pending_age: Age in seconds of the oldest pending row (NULL when none).
SELECT CAST(EXTRACT(epoch FROM now() - (SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status = 'pending')) AS FLOAT) AS anon_1;

-- oldest_sent_age: Seconds since the oldest sent row was sent (NULL: none), via ``ix_outbox_sent_at``.
SELECT CAST(EXTRACT(epoch FROM now() - (SELECT min(outbox.sent_at) AS min_1
FROM outbox
WHERE outbox.sent_at IS NOT NULL)) AS FLOAT) AS anon_1;

-- past_retention: Sent rows older than the retention, counted no further than ``limit`` (a bounded
SELECT count(*) AS count_1
FROM (SELECT outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT %(param_1)s::INTEGER) AS oldest
WHERE oldest.sent_at < now() + %(param_2)s * interval '1 second' AND oldest.status = 'sent';

-- pause: One pause; bind ``b_kind``, ``b_value``, ``b_reason``, ``b_by`` (a pause already in
INSERT INTO relay_pauses (kind, value, reason, paused_by) VALUES (%(b_kind)s::VARCHAR, %(b_value)s::VARCHAR, %(b_reason)s::VARCHAR, %(b_by)s::VARCHAR) RETURNING relay_pauses.id;

-- pay: Set the bucket ``b_name`` to ``b_tokens``, refilled now (database time).
UPDATE relay_rate_buckets SET tokens=%(b_tokens)s, refilled_at=now() WHERE relay_rate_buckets.name = %(b_name)s::VARCHAR;

-- progress_statement: Progress of the keys bound as ``keys``, row-locked, in key order.
SELECT outbox_progress.ordering_key, outbox_progress.sent_seq
FROM outbox_progress
WHERE outbox_progress.ordering_key IN (__[POSTCOMPILE_keys]) ORDER BY outbox_progress.ordering_key FOR UPDATE;

-- purge_failed: Delete the failed rows ``matching`` selects.
DELETE FROM outbox WHERE outbox.status = 'failed' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- purge_sent: Delete up to ``limit`` sent rows older than the retention, oldest first (a range of
DELETE FROM outbox WHERE outbox.id IN (SELECT oldest.id
FROM (SELECT outbox.id AS id, outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT %(param_1)s::INTEGER) AS oldest
WHERE oldest.sent_at < now() + %(param_2)s * interval '1 second' AND oldest.status = 'sent');

-- purge_sent_matching: Delete the sent rows ``matching`` selects (an operator's purge by filter).
DELETE FROM outbox WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- purger_record: Purger ``b_name``'s last two figures, seconds since it last ran, and its holder.
SELECT relay_purger.behind_rows, relay_purger.prev_behind_rows, CAST(EXTRACT(epoch FROM now() - relay_purger.ran_at) AS FLOAT) AS ran_ago, relay_purger.holder
FROM relay_purger
WHERE relay_purger.name = %(b_name)s::VARCHAR;

-- record_action: One audit row: who did what, to which rows, how many (bind every column but id, at).
INSERT INTO relay_audit (id, at, actor, role, via, action, status, selector, matched, changed) VALUES (%(id)s::BIGINT, %(at)s::TIMESTAMP WITH TIME ZONE, %(actor)s::VARCHAR, %(role)s::VARCHAR, %(via)s::VARCHAR, %(action)s::VARCHAR, %(status)s::VARCHAR, %(selector)s::JSON, %(matched)s::INTEGER, %(changed)s::INTEGER);

-- release: Give rows back without spending their attempt (broker unreachable); bind ``keys``,
UPDATE outbox SET status='pending', attempt=(outbox.attempt - %(attempt_1)s::INTEGER), next_retry_at=(now() + %(delay)s * interval '1 second'), locked_by=NULL, locked_until=NULL, last_error=%(error)s::VARCHAR, updated_at=now() WHERE outbox.id = ANY (array((SELECT o.id
FROM unnest(CAST(%(ids)s::VARCHAR AS BIGINT[]), CAST(%(attempts)s::VARCHAR AS INTEGER[])) AS k(id, attempt) JOIN LATERAL (SELECT outbox.id AS id
FROM outbox
WHERE outbox.id = k.id AND outbox.attempt = k.attempt AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS o ON true))) AND outbox.locked_by = %(locked_by_2)s::VARCHAR;

-- renew: Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``.
UPDATE outbox SET locked_until=(now() + %(lease_seconds)s * interval '1 second') WHERE outbox.id = ANY (array((SELECT o.id
FROM unnest(CAST(%(ids)s::VARCHAR AS BIGINT[]), CAST(%(attempts)s::VARCHAR AS INTEGER[])) AS k(id, attempt) JOIN LATERAL (SELECT outbox.id AS id
FROM outbox
WHERE outbox.id = k.id AND outbox.attempt = k.attempt AND coalesce(outbox.status, %(coalesce_1)s::VARCHAR) = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS o ON true))) AND outbox.locked_by = %(locked_by_2)s::VARCHAR;

-- reschedule: Failed rows with attempts left go back to pending after a per-row delay (executemany:
UPDATE outbox SET status='pending', next_retry_at=(now() + %(b_delay)s * interval '1 second'), locked_by=NULL, locked_until=NULL, last_error=%(b_error)s::VARCHAR, updated_at=now() WHERE outbox.id = %(b_id)s::BIGINT AND outbox.attempt = %(b_attempt)s::INTEGER AND outbox.status = 'processing' AND outbox.locked_by = %(b_worker)s::VARCHAR;

-- reserve_key: ``INSERT … (key, 0) ON CONFLICT DO UPDATE SET last_seq = last_seq`` (locks it).
INSERT INTO outbox_sequence (ordering_key, last_seq) VALUES (%(key)s::VARCHAR, %(last_seq)s::BIGINT) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = outbox_sequence.last_seq;

-- resume: Lift the pause bound as ``b_kind`` and ``b_value``.
DELETE FROM relay_pauses WHERE relay_pauses.kind = %(b_kind)s::VARCHAR AND relay_pauses.value = %(b_value)s::VARCHAR;

-- retry_failed: The failed rows ``matching`` selects go back to pending with fresh attempts; their
UPDATE outbox SET status='pending', attempt=%(attempt)s::INTEGER, next_retry_at=NULL, locked_by=NULL, locked_until=NULL, updated_at=now(), expires_at=(now() + %(b_expires_seconds)s * interval '1 second') WHERE outbox.status = 'failed' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE;

-- run_statement: The claimable rows at the places bound as two arrays, ``run_keys`` and ``run_seqs``,
SELECT o.id, o.ordering_key, o.seq, o.size
FROM unnest(%(run_keys)s::VARCHAR[], %(run_seqs)s::BIGINT[]) AS p(ordering_key, seq) JOIN LATERAL (SELECT outbox.id AS id, outbox.ordering_key AS ordering_key, outbox.seq AS seq, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.ordering_key = p.ordering_key AND outbox.seq = p.seq AND outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[])))
 LIMIT %(param_4)s::INTEGER FOR UPDATE SKIP LOCKED) AS o ON true;

-- sent_counted: Events counted sent in the last ``b_minutes`` minutes.
SELECT coalesce(sum(outbox_sent_counts.sent), %(coalesce_2)s::INTEGER) AS coalesce_1
FROM outbox_sent_counts
WHERE outbox_sent_counts.minute > CAST(floor(extract(epoch from now()) / CAST(%(param_1)s::INTEGER AS NUMERIC)) AS BIGINT) - %(b_minutes)s::BIGINT;

-- sent_extent: How many sent rows ``matching`` selects after id ``after``, and the first and last
SELECT count(*) AS count_1, min(outbox.id) AS min_1, max(outbox.id) AS max_1
FROM outbox
WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE AND outbox.id > %(id_2)s::BIGINT;

-- sent_minutes: Per minute ago (0-59), the events counted sent and their mean and largest lag.
SELECT CAST(floor(extract(epoch from now()) / CAST(%(param_1)s::INTEGER AS NUMERIC)) AS BIGINT) - outbox_sent_counts.minute AS minutes_ago, sum(outbox_sent_counts.sent) AS sent, sum(outbox_sent_counts.lag_sum) / CAST(sum(outbox_sent_counts.sent) AS NUMERIC) AS mean_lag, max(outbox_sent_counts.lag_max) AS max_lag
FROM outbox_sent_counts
WHERE outbox_sent_counts.minute > CAST(floor(extract(epoch from now()) / CAST(%(param_2)s::INTEGER AS NUMERIC)) AS BIGINT) - %(param_3)s::BIGINT GROUP BY outbox_sent_counts.minute;

-- sent_per_minute: The last hour's sent rows per minute ago (0-59), with their mean and largest
SELECT floor(CAST(EXTRACT(epoch FROM now() - outbox.sent_at) AS FLOAT) / CAST(60.0 AS NUMERIC)) AS minutes_ago, count(*) AS sent, avg(CAST(EXTRACT(epoch FROM now() - outbox.created_at) AS FLOAT) - CAST(EXTRACT(epoch FROM now() - outbox.sent_at) AS FLOAT)) AS mean_lag, max(CAST(EXTRACT(epoch FROM now() - outbox.created_at) AS FLOAT) - CAST(EXTRACT(epoch FROM now() - outbox.sent_at) AS FLOAT)) AS max_lag
FROM outbox
WHERE outbox.sent_at >= now() + %(param_1)s * interval '1 second' GROUP BY floor(CAST(EXTRACT(epoch FROM now() - outbox.sent_at) AS FLOAT) / CAST(60.0 AS NUMERIC));

-- sent_rows: Sent rows ``matching`` selects, as a claim returns them, with ids in ``(after,
SELECT outbox.id, outbox.event_type, CAST(outbox.payload AS TEXT) AS payload, CAST(outbox.headers AS TEXT) AS headers, outbox.ordering_key, outbox.attempt, CASE WHEN (outbox.created_at BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN outbox.created_at ELSE NULL END AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND outbox.expires_at <= now() AS expired, CASE WHEN (CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END BETWEEN timestamptz '0001-01-02 00:00:00+00' AND timestamptz '9999-12-30 00:00:00+00') THEN CASE WHEN (outbox.expires_at IS NOT NULL AND outbox.expires_at <= now()) THEN outbox.expires_at ELSE NULL END ELSE NULL END AS expires_at
FROM outbox
WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE %(event_type_1)s::VARCHAR ESCAPE '\' AND outbox.ordering_key = %(ordering_key_1)s::VARCHAR AND (lower(outbox.last_error) LIKE '%%' || %(lower_1)s::VARCHAR || '%%' ESCAPE '/') AND outbox.created_at >= now() + %(param_1)s * interval '1 second' AND outbox.created_at < %(created_at_1)s::TIMESTAMP WITH TIME ZONE AND outbox.id > %(id_2)s::BIGINT AND outbox.id <= %(id_3)s::BIGINT ORDER BY outbox.id;

-- sequence_cache: The ``CACHE`` of ``:sequence``: ids a session takes at a time (1 by default).
SELECT seqcache FROM pg_catalog.pg_sequence WHERE seqrelid = CAST(%(sequence)s AS regclass);

-- sequence_look: One look of the wake-up: the id sequence's last value and the oldest running xact.
SELECT pg_sequence_last_value(CAST(%(sequence)s AS regclass)) AS value, CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint) AS xmin;

-- server_connections: The server's ``max_connections``, the connections open now, and those of relay
SELECT CAST(current_setting('max_connections') AS integer) AS max_connections, count(*) AS open, count(*) FILTER (WHERE application_name = 'relay') AS relay FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend';

-- set_progress: Set each key's progress to its number in ``moves``, in one statement (the rows are
UPDATE outbox_progress SET sent_seq=CASE outbox_progress.ordering_key WHEN %(param_1)s::VARCHAR THEN %(param_2)s::INTEGER WHEN %(param_3)s::VARCHAR THEN %(param_4)s::INTEGER ELSE outbox_progress.sent_seq END WHERE outbox_progress.ordering_key IN (__[POSTCOMPILE_ordering_key_1]);

-- stalled_keys: Up to ``limit`` stalled keys, in no order (:data:`STALL_COLUMNS`).
SELECT k.ordering_key, k.sent_seq, k.id, k.status, k.last_error, k.last_seq
FROM (SELECT outbox_progress.ordering_key AS ordering_key, outbox_progress.sent_seq AS sent_seq, h.id AS id, h.status AS status, h.last_error AS last_error, top.seq AS last_seq
FROM outbox_progress LEFT OUTER JOIN LATERAL (SELECT outbox.id AS id, outbox.status AS status, outbox.last_error AS last_error
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + %(sent_seq_1)s::BIGINT
 LIMIT %(param_1)s::INTEGER) AS h ON true LEFT OUTER JOIN LATERAL (SELECT outbox.seq AS seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq IS NOT NULL ORDER BY outbox.seq DESC
 LIMIT %(param_2)s::INTEGER) AS top ON true) AS k
WHERE k.id IS NULL AND k.last_seq > k.sent_seq + %(sent_seq_2)s::BIGINT OR k.status IN ('failed', 'sent')
 LIMIT %(param_3)s::INTEGER;

-- start_progress: ``INSERT … (key, 0) ON CONFLICT DO NOTHING`` into ``outbox_progress``.
INSERT INTO outbox_progress (ordering_key, sent_seq) VALUES (%(key)s::VARCHAR, %(sent_seq)s::BIGINT) ON CONFLICT (ordering_key) DO NOTHING;

-- take_lease: Lease purger ``b_name`` to ``b_holder`` for ``b_seconds`` if it is free, expired or
UPDATE relay_purger SET holder=%(b_holder)s::VARCHAR, expires_at=(now() + %(b_seconds)s * interval '1 second') WHERE relay_purger.name = %(b_name)s::VARCHAR AND (relay_purger.holder IS NULL OR relay_purger.holder = %(b_holder)s::VARCHAR OR relay_purger.expires_at < now());

-- top_id: The outbox's highest id (its primary key's last entry): no row a claim could take
SELECT max(outbox.id) AS max_1
FROM outbox;

-- unordered_ids: The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
SELECT anon_1.id, anon_1.size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, %(coalesce_2)s::VARCHAR) = 'processing' AND outbox.locked_until < now() AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT %(param_4)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_1 UNION ALL SELECT anon_2.id, anon_2.size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_5)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_6)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_7)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_8)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_2 ORDER BY id
 LIMIT %(param_9)s::INTEGER;

-- unordered_ids[expired=False]: The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
SELECT anon_1.id, anon_1.size
FROM (SELECT outbox.id AS id, octet_length(CAST(outbox.payload AS TEXT)) + coalesce(octet_length(CAST(outbox.headers AS TEXT)), %(coalesce_1)s::INTEGER) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) AND outbox.id >= %(floor)s::BIGINT AND outbox.event_type != ALL (CAST(%(param_1)s::VARCHAR AS TEXT[])) AND NOT (outbox.event_type LIKE ANY (CAST(%(param_2)s::VARCHAR AS TEXT[]))) AND (outbox.ordering_key IS NULL OR outbox.ordering_key != ALL (CAST(%(param_3)s::VARCHAR AS TEXT[]))) ORDER BY outbox.id
 LIMIT %(param_4)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED) AS anon_1;

-- unroutable_types: Event types with rows waiting or failed as unroutable, and how many, up to ``limit``.
SELECT outbox.event_type, count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('pending', 'failed') AND outbox.last_error LIKE %(last_error_1)s::VARCHAR GROUP BY outbox.event_type
 LIMIT %(param_1)s::INTEGER;
