-- add_purger: Purger ``b_name``'s row, where a database lacks it (its tables were copied without
INSERT INTO relay_purger (name) SELECT ? AS anon_1
WHERE NOT (EXISTS (SELECT relay_purger.name
FROM relay_purger
WHERE relay_purger.name = ?));

-- advance: Move key ``b_key``'s progress from ``b_from`` to ``b_to`` (executemany).
UPDATE outbox_progress SET sent_seq=? WHERE outbox_progress.ordering_key = ? AND outbox_progress.sent_seq = ?;

-- audit_page: Audit rows, newest first, from just before ``after`` (keyset by id).
SELECT relay_audit.id, relay_audit.at, relay_audit.actor, relay_audit.role, relay_audit.via, relay_audit.action, relay_audit.status, relay_audit.selector, relay_audit.matched, relay_audit.changed
FROM relay_audit
WHERE relay_audit.id < ? ORDER BY relay_audit.id DESC
 LIMIT ? OFFSET ?;

-- backlog: How many unordered rows and heads of keys are claimable now, counting each no
SELECT (SELECT count(*) AS count_1
FROM (SELECT anon_3.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, ?) = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now')) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT ? OFFSET ?) AS anon_3 UNION ALL SELECT anon_4.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_3])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_2]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_4 ORDER BY id
 LIMIT ? OFFSET ?) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT outbox.id AS id
FROM outbox_progress JOIN outbox ON outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + ?
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) OR outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_5])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_3])))
 LIMIT ? OFFSET ?) AS anon_5) AS anon_1;

-- backlog[expired=False]: How many unordered rows and heads of keys are claimable now, counting each no
SELECT (SELECT count(*) AS count_1
FROM (SELECT anon_3.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_3) AS anon_2) + (SELECT count(*) AS count_2
FROM (SELECT outbox.id AS id
FROM outbox_progress JOIN outbox ON outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + ?
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) OR outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_3])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_2])))
 LIMIT ? OFFSET ?) AS anon_4) AS anon_1;

-- beat_ages: Each heartbeat's name and seconds since it beat.
SELECT relay_heartbeats.name, (julianday('now') - julianday(relay_heartbeats.beat_at)) * 86400.0 AS anon_1
FROM relay_heartbeats;

-- beat_insert: Heartbeat ``b_name``'s first row, at the database's now.
INSERT INTO relay_heartbeats (name, beat_at) VALUES (?, (strftime('%Y-%m-%d %H:%M:%f000', 'now')));

-- beat_update: Set heartbeat ``b_name``'s time to the database's now (0 rows: not there yet).
UPDATE relay_heartbeats SET beat_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE relay_heartbeats.name = ?;

-- bucket: The bucket named ``b_name``: its tokens and the seconds since it was last refilled,
SELECT relay_rate_buckets.tokens, (julianday('now') - julianday(relay_rate_buckets.refilled_at)) * 86400.0 AS elapsed
FROM relay_rate_buckets
WHERE relay_rate_buckets.name = ?;

-- bucket_exists: Whether the bucket ``b_name`` exists (unlocked: a locked one is another claim's).
SELECT relay_rate_buckets.name
FROM relay_rate_buckets
WHERE relay_rate_buckets.name = ?;

-- bury: Rows that failed their last attempt become ``failed`` (executemany: ``b_id``,
UPDATE outbox SET status='failed', locked_until=NULL, last_error=?, updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id = ? AND outbox.attempt = ? AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- claim_statement: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + ?), locked_by=?, locked_until=strftime(?, 'now', printf(?, ?)), updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id IN (SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, anon_3.size AS size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, ?) = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now')) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT ? OFFSET ?) AS anon_3 UNION ALL SELECT anon_4.id AS id, anon_4.size AS size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_3])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_2]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_4 ORDER BY id
 LIMIT ? OFFSET ?) AS anon_2) AS anon_1
WHERE anon_1.upto <= ? OR anon_1.upto = anon_1.size AND ? = 1) RETURNING id, event_type, payload AS payload, headers AS headers, ordering_key, attempt, created_at AS created_at, seq, event_id, expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now') AS expired, CASE WHEN (expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now')) THEN expires_at ELSE NULL END AS expires_at;

-- claim_statement[expired=False]: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + ?), locked_by=?, locked_until=strftime(?, 'now', printf(?, ?)), updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id IN (SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, anon_3.size AS size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_3) AS anon_2) AS anon_1
WHERE anon_1.upto <= ? OR anon_1.upto = anon_1.size AND ? = 1) RETURNING id, event_type, payload AS payload, headers AS headers, ordering_key, attempt, created_at AS created_at, seq, event_id, expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now') AS expired, CASE WHEN (expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now')) THEN expires_at ELSE NULL END AS expires_at;

-- claim_statement[sized_late=True]: Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
UPDATE outbox SET status='processing', attempt=(outbox.attempt + ?), locked_by=?, locked_until=strftime(?, 'now', printf(?, ?)), updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id IN (SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.size AS size, sum(anon_2.size) OVER (ORDER BY anon_2.id) AS upto
FROM (SELECT anon_3.id AS id, (SELECT length(CAST(sized_row.payload AS BLOB)) + coalesce(length(CAST(sized_row.headers AS BLOB)), ?) AS anon_4
FROM outbox AS sized_row
WHERE sized_row.id = anon_3.id) AS size
FROM (SELECT anon_5.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, ?) = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now')) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT ? OFFSET ?) AS anon_5 UNION ALL SELECT anon_6.id AS id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_3])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_2]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_6 ORDER BY id
 LIMIT ? OFFSET ?) AS anon_3
 LIMIT ? OFFSET ?) AS anon_2) AS anon_1
WHERE anon_1.upto <= ? OR anon_1.upto = anon_1.size AND ? = 1) RETURNING id, event_type, payload AS payload, headers AS headers, ordering_key, attempt, created_at AS created_at, seq, event_id, expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now') AS expired, CASE WHEN (expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now')) THEN expires_at ELSE NULL END AS expires_at;

-- clock_reading: The database's clock, as an aware UTC timestamp (the doctor's skew check).
SELECT (strftime('%Y-%m-%d %H:%M:%f000', 'now')) AS utc_now_1;

-- count_by_status: Rows per unsent status, and every row as ``total`` (sent = total - the rest): the
SELECT outbox.status, count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') GROUP BY outbox.status UNION ALL SELECT 'total', count(*) AS count_2
FROM outbox;

-- count_matching: How many rows ``matching`` selects.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- count_sent: Add ``b_sent`` events to this minute's count in shard ``b_shard``, with their lag
INSERT INTO outbox_sent_counts (minute, shard, sent, lag_sum, lag_max) VALUES (CAST(floor(((julianday('now') - 2440587.5) * 86400.0) / (? + 0.0)) AS BIGINT), ?, ?, (? * ((julianday('now') - 2440587.5) * 86400.0) - ?), (((julianday('now') - 2440587.5) * 86400.0) - ?)) ON CONFLICT (minute, shard) DO UPDATE SET sent = (outbox_sent_counts.sent + excluded.sent), lag_sum = (outbox_sent_counts.lag_sum + excluded.lag_sum), lag_max = max(outbox_sent_counts.lag_max, excluded.lag_max) RETURNING minute;

-- count_stalled: How many keys are stalled, counted up to ``limit``.
SELECT count(*) AS count_1
FROM (SELECT k.ordering_key AS ordering_key, k.sent_seq AS sent_seq, k.id AS id, k.status AS status, k.last_error AS last_error, k.last_seq AS last_seq
FROM (SELECT outbox_progress.ordering_key AS ordering_key, outbox_progress.sent_seq AS sent_seq, h.id AS id, h.status AS status, h.last_error AS last_error, (SELECT outbox.seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq IS NOT NULL ORDER BY outbox.seq DESC
 LIMIT ? OFFSET ?) AS last_seq
FROM outbox_progress LEFT OUTER JOIN outbox AS h ON h.ordering_key = outbox_progress.ordering_key AND h.seq = outbox_progress.sent_seq + ?) AS k
WHERE k.id IS NULL AND k.last_seq > k.sent_seq + ? OR k.status IN ('failed', 'sent')
 LIMIT ? OFFSET ?) AS anon_1;

-- delete_sent: Confirmed rows are deleted instead of marked sent, fenced as ``mark_sent``; bind
DELETE FROM outbox WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- delivery_lag: How late delivery is: seconds since the oldest due row among the first
SELECT (julianday('now') - julianday((SELECT min(head.created_at) AS min_1
FROM (SELECT outbox.created_at AS created_at, outbox.next_retry_at AS next_retry_at
FROM outbox
WHERE outbox.status = 'pending' AND outbox.seq IS NULL ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS head
WHERE head.next_retry_at IS NULL OR head.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))))) * 86400.0 AS anon_1;

-- end_run: Give purger ``b_name``'s lease back and record the run: ``b_behind`` rows left past
UPDATE relay_purger SET prev_behind_rows=relay_purger.behind_rows, behind_rows=?, holder=NULL, expires_at=NULL, ran_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE relay_purger.name = ? AND relay_purger.holder = ?;

-- event_details: Every column of the rows ``matching`` selects, JSON as stored text (one event's page).
SELECT outbox.id, outbox.event_type, outbox.payload AS payload, outbox.headers AS headers, outbox.ordering_key, outbox.status, outbox.attempt, outbox.next_retry_at, outbox.locked_by, outbox.locked_until, outbox.last_error, outbox.created_at AS created_at, outbox.updated_at, outbox.sent_at, outbox.seq, outbox.event_id, outbox.expires_at
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ? ORDER BY outbox.id
 LIMIT ? OFFSET ?;

-- expired_leases: How many processing rows have an expired lease.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'));

-- expired_unordered: Leases that ran out, in the form the lane of expired leases reads them.
coalesce(outbox.status, ?) = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'));

-- failed_places: Keys and numbers of the failed ordered rows ``matching`` selects: purging a failed
SELECT outbox.ordering_key, outbox.seq
FROM outbox
WHERE outbox.status = 'failed' AND outbox.seq IS NOT NULL AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- find: The pause bound as ``b_kind`` and ``b_value``, if in force.
SELECT relay_pauses.id
FROM relay_pauses
WHERE relay_pauses.kind = ? AND relay_pauses.value = ?;

-- first_after: The lowest number of key ``b_key`` above ``b_after`` (a missing head's key: where
SELECT outbox.seq
FROM outbox
WHERE outbox.ordering_key = ? AND outbox.seq IS NOT NULL AND outbox.seq > ? ORDER BY outbox.seq
 LIMIT ? OFFSET ?;

-- forget_counts: Drop the counts of minutes older than ``b_minutes`` minutes.
DELETE FROM outbox_sent_counts WHERE outbox_sent_counts.minute <= CAST(floor(((julianday('now') - 2440587.5) * 86400.0) / (? + 0.0)) AS BIGINT) - ?;

-- gauges: Metrics' one read: capped counts per unfinished status and expired leases, oldest age.
SELECT (SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'pending'
 LIMIT ? OFFSET ?) AS anon_1) AS pending, (SELECT count(*) AS count_2
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'processing'
 LIMIT ? OFFSET ?) AS anon_2) AS processing, (SELECT count(*) AS count_3
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'failed'
 LIMIT ? OFFSET ?) AS anon_3) AS failed, (SELECT count(*) AS count_4
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))
 LIMIT ? OFFSET ?) AS anon_4) AS expired_leases, (julianday('now') - julianday((SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status IN ('pending', 'processing', 'failed') AND outbox.status = 'pending'))) * 86400.0 AS oldest_pending_age;

-- heads_statement: Claimable heads of their key (number ``sent_seq + 1``), oldest first, locked.
SELECT outbox.id, outbox.ordering_key, outbox.seq, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox_progress JOIN outbox ON outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq = outbox_progress.sent_seq + ?
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) OR outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?;

-- held: Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`.
SELECT outbox.id
FROM outbox
WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- held_rows: How many pending rows ``hold`` holds back, counted no further than ``limit`` (a
SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status = 'pending' AND NOT ((outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))))
 LIMIT ? OFFSET ?) AS anon_1;

-- in_force: ``(kind, value)`` of every pause in force: what a relay holds back.
SELECT relay_pauses.kind, relay_pauses.value
FROM relay_pauses;

-- inbox_claim: ``INSERT … ON CONFLICT DO NOTHING RETURNING consumer``: a returned row tells that it
INSERT INTO relay_inbox (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING consumer;

-- inbox_delete: Delete the inbox rows whose ``(consumer, message_id)`` are bound as ``keys``.
DELETE FROM relay_inbox WHERE (relay_inbox.consumer, relay_inbox.message_id) IN (__[POSTCOMPILE_keys]);

-- inbox_oldest: Keys of up to ``limit`` inbox rows received more than ``older_than_seconds`` ago,
SELECT relay_inbox.consumer, relay_inbox.message_id
FROM relay_inbox
WHERE relay_inbox.received_at < strftime(?, 'now', printf(?, ?)) ORDER BY relay_inbox.received_at
 LIMIT ? OFFSET ?;

-- inbox_purge: Delete the rows :meth:`inbox_oldest` selects, in one statement.
DELETE FROM relay_inbox WHERE (relay_inbox.consumer, relay_inbox.message_id) IN (SELECT relay_inbox.consumer, relay_inbox.message_id
FROM relay_inbox
WHERE relay_inbox.received_at < strftime(?, 'now', printf(?, ?)) ORDER BY relay_inbox.received_at
 LIMIT ? OFFSET ?);

-- insert_event: One new event; bind its columns, ``delay_seconds`` when ``delayed`` (claimable that
INSERT INTO outbox (event_type, payload, headers, ordering_key, next_retry_at, expires_at) VALUES (?, ?, ?, ?, strftime(?, 'now', printf(?, ?)), strftime(?, 'now', printf(?, ?)));

-- lease_statement: Lease the rows bound as ``ids``, returning them.
UPDATE outbox SET status='processing', attempt=(outbox.attempt + ?), locked_by=?, locked_until=strftime(?, 'now', printf(?, ?)), updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id IN (__[POSTCOMPILE_ids]) RETURNING id, event_type, payload AS payload, headers AS headers, ordering_key, attempt, created_at AS created_at, seq, event_id, expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now') AS expired, CASE WHEN (expires_at IS NOT NULL AND julianday(expires_at) <= julianday('now')) THEN expires_at ELSE NULL END AS expires_at;

-- leases_by_holder: Processing rows per lease holder: how many, how many expired, first and last expiry.
SELECT outbox.locked_by, count(*) AS rows, sum(CASE WHEN (outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) THEN ? ELSE ? END) AS expired, min(outbox.locked_until) AS first_expiry, max(outbox.locked_until) AS last_expiry
FROM outbox
WHERE outbox.status = 'processing' GROUP BY outbox.locked_by ORDER BY outbox.locked_by;

-- list_events: Rows ``matching`` selects, by id from just after ``after`` (keyset, never OFFSET).
SELECT outbox.id, outbox.event_type, outbox.ordering_key, outbox.status, outbox.attempt, outbox.last_error, outbox.locked_by, outbox.locked_until, outbox.next_retry_at, outbox.created_at AS created_at, outbox.updated_at
FROM outbox
WHERE outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ? AND outbox.id > ? ORDER BY outbox.id
 LIMIT ? OFFSET ?;

-- listed: Every pause, oldest first, with its age in seconds on the database's clock.
SELECT relay_pauses.kind, relay_pauses.value, relay_pauses.reason, relay_pauses.paused_by, relay_pauses.paused_at, (julianday('now') - julianday(relay_pauses.paused_at)) * 86400.0 AS age_seconds
FROM relay_pauses ORDER BY relay_pauses.id;

-- mark_sent: Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...].
UPDATE outbox SET status='sent', locked_until=NULL, updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')), sent_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- matching: The rows an operator's filter selects (``relay.store.operations.filters``).
outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- new_bucket: A bucket named ``b_name`` holding ``b_tokens``, refilled now.
INSERT INTO relay_rate_buckets (name, tokens) VALUES (?, ?);

-- oldest_past_retention: Ids of the sent rows older than the retention among the ``limit`` oldest rows that
SELECT oldest.id
FROM (SELECT outbox.id AS id, outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT ? OFFSET ?) AS oldest
WHERE oldest.sent_at < strftime(?, 'now', printf(?, ?)) AND oldest.status = 'sent';

-- oldest_pending_age: Age in seconds of the oldest pending row (NULL when none).
SELECT (julianday('now') - julianday((SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status = 'pending'))) * 86400.0 AS anon_1;

-- oldest_sent_age: Seconds since the oldest sent row was sent (NULL: none), via ``ix_outbox_sent_at``.
SELECT (julianday('now') - julianday((SELECT min(outbox.sent_at) AS min_1
FROM outbox
WHERE outbox.sent_at IS NOT NULL))) * 86400.0 AS anon_1;

-- past_retention: Sent rows older than the retention, counted no further than ``limit`` (a bounded
SELECT count(*) AS count_1
FROM (SELECT outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT ? OFFSET ?) AS oldest
WHERE oldest.sent_at < strftime(?, 'now', printf(?, ?)) AND oldest.status = 'sent';

-- pause: One pause; bind ``b_kind``, ``b_value``, ``b_reason``, ``b_by`` (a pause already in
INSERT INTO relay_pauses (kind, value, reason, paused_by) VALUES (?, ?, ?, ?);

-- pay: Set the bucket ``b_name`` to ``b_tokens``, refilled now (database time).
UPDATE relay_rate_buckets SET tokens=?, refilled_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE relay_rate_buckets.name = ?;

-- progress_statement: Progress of the keys bound as ``keys``, row-locked, in key order.
SELECT outbox_progress.ordering_key, outbox_progress.sent_seq
FROM outbox_progress
WHERE outbox_progress.ordering_key IN (__[POSTCOMPILE_keys]) ORDER BY outbox_progress.ordering_key;

-- purge_failed: Delete the failed rows ``matching`` selects.
DELETE FROM outbox WHERE outbox.status = 'failed' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- purge_sent: Delete up to ``limit`` sent rows older than the retention, oldest first (a range of
DELETE FROM outbox WHERE outbox.id IN (SELECT oldest.id
FROM (SELECT outbox.id AS id, outbox.sent_at AS sent_at, outbox.status AS status
FROM outbox
WHERE outbox.sent_at IS NOT NULL ORDER BY outbox.sent_at
 LIMIT ? OFFSET ?) AS oldest
WHERE oldest.sent_at < strftime(?, 'now', printf(?, ?)) AND oldest.status = 'sent');

-- purge_sent_matching: Delete the sent rows ``matching`` selects (an operator's purge by filter).
DELETE FROM outbox WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- purger_record: Purger ``b_name``'s last two figures, seconds since it last ran, and its holder.
SELECT relay_purger.behind_rows, relay_purger.prev_behind_rows, (julianday('now') - julianday(relay_purger.ran_at)) * 86400.0 AS ran_ago, relay_purger.holder
FROM relay_purger
WHERE relay_purger.name = ?;

-- record_action: One audit row: who did what, to which rows, how many (bind every column but id, at).
INSERT INTO relay_audit (id, at, actor, role, via, action, status, selector, matched, changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- release: Give rows back without spending their attempt (broker unreachable); bind ``keys``,
UPDATE outbox SET status='pending', attempt=(outbox.attempt - ?), next_retry_at=strftime(?, 'now', printf(?, ?)), locked_by=NULL, locked_until=NULL, last_error=?, updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- renew: Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``.
UPDATE outbox SET locked_until=strftime(?, 'now', printf(?, ?)) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- reschedule: Failed rows with attempts left go back to pending after a per-row delay (executemany:
UPDATE outbox SET status='pending', next_retry_at=strftime(?, 'now', printf(?, ?)), locked_by=NULL, locked_until=NULL, last_error=?, updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')) WHERE outbox.id = ? AND outbox.attempt = ? AND outbox.status = 'processing' AND outbox.locked_by = ?;

-- reserve_key: ``INSERT … (key, 0) ON CONFLICT DO NOTHING``: the write lock already serializes.
INSERT INTO outbox_sequence (ordering_key, last_seq) VALUES (?, ?) ON CONFLICT (ordering_key) DO NOTHING;

-- resume: Lift the pause bound as ``b_kind`` and ``b_value``.
DELETE FROM relay_pauses WHERE relay_pauses.kind = ? AND relay_pauses.value = ?;

-- retry_failed: The failed rows ``matching`` selects go back to pending with fresh attempts; their
UPDATE outbox SET status='pending', attempt=?, next_retry_at=NULL, locked_by=NULL, locked_until=NULL, updated_at=(strftime('%Y-%m-%d %H:%M:%f000', 'now')), expires_at=strftime(?, 'now', printf(?, ?)) WHERE outbox.status = 'failed' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ?;

-- run_statement: The claimable rows among ``(ordering_key, seq)`` pairs bound as ``places``, locked.
SELECT outbox.id, outbox.ordering_key, outbox.seq, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE (outbox.ordering_key, outbox.seq) IN (__[POSTCOMPILE_places]) AND outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) OR outbox.status = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1])));

-- sent_counted: Events counted sent in the last ``b_minutes`` minutes.
SELECT coalesce(sum(outbox_sent_counts.sent), ?) AS coalesce_1
FROM outbox_sent_counts
WHERE outbox_sent_counts.minute > CAST(floor(((julianday('now') - 2440587.5) * 86400.0) / (? + 0.0)) AS BIGINT) - ?;

-- sent_extent: How many sent rows ``matching`` selects after id ``after``, and the first and last
SELECT count(*) AS count_1, min(outbox.id) AS min_1, max(outbox.id) AS max_1
FROM outbox
WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ? AND outbox.id > ?;

-- sent_minutes: Per minute ago (0-59), the events counted sent and their mean and largest lag.
SELECT CAST(floor(((julianday('now') - 2440587.5) * 86400.0) / (? + 0.0)) AS BIGINT) - outbox_sent_counts.minute AS minutes_ago, sum(outbox_sent_counts.sent) AS sent, sum(outbox_sent_counts.lag_sum) / (sum(outbox_sent_counts.sent) + 0.0) AS mean_lag, max(outbox_sent_counts.lag_max) AS max_lag
FROM outbox_sent_counts
WHERE outbox_sent_counts.minute > CAST(floor(((julianday('now') - 2440587.5) * 86400.0) / (? + 0.0)) AS BIGINT) - ? GROUP BY outbox_sent_counts.minute;

-- sent_per_minute: The last hour's sent rows per minute ago (0-59), with their mean and largest
SELECT floor(((julianday('now') - julianday(outbox.sent_at)) * 86400.0) / (60.0 + 0.0)) AS minutes_ago, count(*) AS sent, avg((julianday('now') - julianday(outbox.created_at)) * 86400.0 - (julianday('now') - julianday(outbox.sent_at)) * 86400.0) AS mean_lag, max((julianday('now') - julianday(outbox.created_at)) * 86400.0 - (julianday('now') - julianday(outbox.sent_at)) * 86400.0) AS max_lag
FROM outbox
WHERE outbox.sent_at >= strftime(?, 'now', printf(?, ?)) GROUP BY floor(((julianday('now') - julianday(outbox.sent_at)) * 86400.0) / (60.0 + 0.0));

-- sent_rows: Sent rows ``matching`` selects, as a claim returns them, with ids in ``(after,
SELECT outbox.id, outbox.event_type, outbox.payload AS payload, outbox.headers AS headers, outbox.ordering_key, outbox.attempt, outbox.created_at AS created_at, outbox.seq, outbox.event_id, outbox.expires_at IS NOT NULL AND julianday(outbox.expires_at) <= julianday('now') AS expired, CASE WHEN (outbox.expires_at IS NOT NULL AND julianday(outbox.expires_at) <= julianday('now')) THEN outbox.expires_at ELSE NULL END AS expires_at
FROM outbox
WHERE outbox.status = 'sent' AND outbox.status IN ('failed') AND outbox.id IN (__[POSTCOMPILE_id_1]) AND outbox.event_type LIKE ? ESCAPE '\' AND outbox.ordering_key = ? AND (lower(outbox.last_error) LIKE '%' || ? || '%' ESCAPE '/') AND outbox.created_at >= strftime(?, 'now', printf(?, ?)) AND outbox.created_at < ? AND outbox.id > ? AND outbox.id <= ? ORDER BY outbox.id;

-- set_progress: Set each key's progress to its number in ``moves``, in one statement (the rows are
UPDATE outbox_progress SET sent_seq=CASE outbox_progress.ordering_key WHEN ? THEN ? WHEN ? THEN ? ELSE outbox_progress.sent_seq END WHERE outbox_progress.ordering_key IN (__[POSTCOMPILE_ordering_key_1]);

-- stalled_keys: Up to ``limit`` stalled keys, in no order (:data:`STALL_COLUMNS`).
SELECT k.ordering_key, k.sent_seq, k.id, k.status, k.last_error, k.last_seq
FROM (SELECT outbox_progress.ordering_key AS ordering_key, outbox_progress.sent_seq AS sent_seq, h.id AS id, h.status AS status, h.last_error AS last_error, (SELECT outbox.seq
FROM outbox
WHERE outbox.ordering_key = outbox_progress.ordering_key AND outbox.seq IS NOT NULL ORDER BY outbox.seq DESC
 LIMIT ? OFFSET ?) AS last_seq
FROM outbox_progress LEFT OUTER JOIN outbox AS h ON h.ordering_key = outbox_progress.ordering_key AND h.seq = outbox_progress.sent_seq + ?) AS k
WHERE k.id IS NULL AND k.last_seq > k.sent_seq + ? OR k.status IN ('failed', 'sent')
 LIMIT ? OFFSET ?;

-- start_progress: ``INSERT … (key, 0) ON CONFLICT DO NOTHING`` into ``outbox_progress``.
INSERT INTO outbox_progress (ordering_key, sent_seq) VALUES (?, ?) ON CONFLICT (ordering_key) DO NOTHING;

-- take_lease: Lease purger ``b_name`` to ``b_holder`` for ``b_seconds`` if it is free, expired or
UPDATE relay_purger SET holder=?, expires_at=strftime(?, 'now', printf(?, ?)) WHERE relay_purger.name = ? AND (relay_purger.holder IS NULL OR relay_purger.holder = ? OR relay_purger.expires_at < (strftime('%Y-%m-%d %H:%M:%f000', 'now')));

-- top_id: The outbox's highest id (its primary key's last entry): no row a claim could take
SELECT max(outbox.id) AS max_1
FROM outbox;

-- unordered_ids: The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
SELECT anon_1.id, anon_1.size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND coalesce(outbox.status, ?) = 'processing' AND outbox.locked_until < (strftime('%Y-%m-%d %H:%M:%f000', 'now')) AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.locked_until, outbox.id
 LIMIT ? OFFSET ?) AS anon_1 UNION ALL SELECT anon_2.id, anon_2.size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_3])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_2]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_2 ORDER BY id
 LIMIT ? OFFSET ?;

-- unordered_ids[expired=False]: The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
SELECT anon_1.id, anon_1.size
FROM (SELECT outbox.id AS id, length(CAST(outbox.payload AS BLOB)) + coalesce(length(CAST(outbox.headers AS BLOB)), ?) AS size
FROM outbox
WHERE outbox.seq IS NULL AND outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (strftime('%Y-%m-%d %H:%M:%f000', 'now'))) AND outbox.id >= ? AND (outbox.event_type NOT IN (__[POSTCOMPILE_event_type_1])) AND outbox.event_type NOT LIKE ? ESCAPE '\' AND (outbox.ordering_key IS NULL OR (outbox.ordering_key NOT IN (__[POSTCOMPILE_ordering_key_1]))) ORDER BY outbox.id
 LIMIT ? OFFSET ?) AS anon_1;

-- unroutable_types: Event types with rows waiting or failed as unroutable, and how many, up to ``limit``.
SELECT outbox.event_type, count(*) AS count_1
FROM outbox
WHERE outbox.status IN ('pending', 'failed') AND outbox.last_error LIKE ? GROUP BY outbox.event_type
 LIMIT ? OFFSET ?;
