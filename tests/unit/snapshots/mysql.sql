-- backlog: How many rows are claimable now, counting no further than ``limit`` (bounded scan).
SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (UTC_TIMESTAMP(6))) OR outbox.status = 'processing' AND outbox.locked_until < (UTC_TIMESTAMP(6))) AND (outbox.ordering_key IS NULL OR NOT (EXISTS (SELECT ahead.id
FROM outbox AS ahead
WHERE ahead.ordering_key = outbox.ordering_key AND ahead.id < outbox.id AND ahead.status != 'sent')))
 LIMIT %s) AS anon_1;

-- bury: Rows that failed their last attempt become ``failed`` (executemany: ``b_id``,
UPDATE outbox SET status='failed', locked_until=NULL, last_error=%s, updated_at=(UTC_TIMESTAMP(6)) WHERE outbox.id = %s AND outbox.attempt = %s AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- claimed_statement: The leased rows as the claim returns them; bind ``ids``.
SELECT outbox.id, outbox.event_type, outbox.payload, outbox.headers, outbox.ordering_key, outbox.attempt, outbox.created_at
FROM outbox
WHERE outbox.id IN (__[POSTCOMPILE_ids]);

-- count_by_status: Rows per status.
SELECT outbox.status, count(*) AS count_1
FROM outbox GROUP BY outbox.status;

-- expired_leases: How many processing rows have an expired lease.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status = 'processing' AND outbox.locked_until < (UTC_TIMESTAMP(6));

-- held: Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`.
SELECT outbox.id
FROM outbox
WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- lease_statement: Lease the picked rows; bind ``ids``.
UPDATE outbox SET status='processing', attempt=(outbox.attempt + %s), locked_by=%s, locked_until=timestampadd(MICROSECOND, CAST(round(%s * 1000000) AS SIGNED INTEGER), (UTC_TIMESTAMP(6))), updated_at=(UTC_TIMESTAMP(6)) WHERE outbox.id IN (__[POSTCOMPILE_ids]);

-- list_failed: Dead-lettered rows, oldest first.
SELECT outbox.id, outbox.event_type, outbox.attempt, outbox.last_error, outbox.created_at, outbox.updated_at
FROM outbox
WHERE outbox.status = 'failed' ORDER BY outbox.id
 LIMIT %s;

-- mark_sent: Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...].
UPDATE outbox SET status='sent', locked_until=NULL, updated_at=(UTC_TIMESTAMP(6)), sent_at=(UTC_TIMESTAMP(6)) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- oldest_pending_age: Age in seconds of the oldest pending row (NULL when none).
SELECT timestampdiff(MICROSECOND, (SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status = 'pending'), (UTC_TIMESTAMP(6))) / 1000000.0 AS anon_1;

-- pick_statement: ``SELECT id … ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED`` over one status.
SELECT outbox.id
FROM outbox
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= (UTC_TIMESTAMP(6))) OR outbox.status = 'processing' AND outbox.locked_until < (UTC_TIMESTAMP(6))) AND (outbox.ordering_key IS NULL OR NOT (EXISTS (SELECT ahead.id
FROM outbox AS ahead
WHERE ahead.ordering_key = outbox.ordering_key AND ahead.id < outbox.id AND ahead.status != 'sent'))) AND (outbox.ordering_key IS NULL OR NOT (EXISTS (SELECT ahead.id
FROM outbox AS ahead
WHERE ahead.ordering_key = outbox.ordering_key AND ahead.id < outbox.id AND ahead.status != 'sent'))) ORDER BY outbox.id
 LIMIT %s FOR UPDATE SKIP LOCKED;

-- purge_failed: Delete failed rows (all, or those in ``ids``).
DELETE FROM outbox WHERE outbox.status = 'failed';

-- purge_sent: Delete up to ``limit`` sent rows older than the retention, oldest first.
DELETE FROM outbox WHERE outbox.id IN (SELECT victims.id
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status = 'sent' AND timestampdiff(MICROSECOND, outbox.sent_at, (UTC_TIMESTAMP(6))) / 1000000.0 > %s ORDER BY outbox.id
 LIMIT %s) AS victims);

-- release: Give rows back without spending their attempt (broker unreachable); bind ``keys``,
UPDATE outbox SET status='pending', attempt=(outbox.attempt - %s), next_retry_at=timestampadd(MICROSECOND, CAST(round(%s * 1000000) AS SIGNED INTEGER), (UTC_TIMESTAMP(6))), locked_by=NULL, locked_until=NULL, last_error=%s, updated_at=(UTC_TIMESTAMP(6)) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- renew: Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``.
UPDATE outbox SET locked_until=timestampadd(MICROSECOND, CAST(round(%s * 1000000) AS SIGNED INTEGER), (UTC_TIMESTAMP(6))) WHERE (outbox.id, outbox.attempt) IN (__[POSTCOMPILE_keys]) AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- reschedule: Failed rows with attempts left go back to pending after a per-row delay (executemany:
UPDATE outbox SET status='pending', next_retry_at=timestampadd(MICROSECOND, CAST(round(%s * 1000000) AS SIGNED INTEGER), (UTC_TIMESTAMP(6))), locked_by=NULL, locked_until=NULL, last_error=%s, updated_at=(UTC_TIMESTAMP(6)) WHERE outbox.id = %s AND outbox.attempt = %s AND outbox.status = 'processing' AND outbox.locked_by = %s;

-- retry_failed: Failed rows (all, or those in ``ids``) go back to pending with fresh attempts.
UPDATE outbox SET status='pending', attempt=%s, next_retry_at=NULL, locked_by=NULL, locked_until=NULL, updated_at=(UTC_TIMESTAMP(6)) WHERE outbox.status = 'failed';
