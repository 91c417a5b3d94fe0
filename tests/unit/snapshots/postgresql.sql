-- backlog: How many rows are claimable now, counting no further than ``limit`` (bounded scan).
SELECT count(*) AS count_1
FROM (SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND (outbox.ordering_key IS NULL OR NOT (EXISTS (SELECT ahead.id
FROM outbox AS ahead
WHERE ahead.ordering_key = outbox.ordering_key AND ahead.id < outbox.id AND ahead.status != 'sent')))
 LIMIT %(param_1)s::INTEGER) AS anon_1;

-- bury: Rows that failed their last attempt become ``failed`` (executemany: ``b_id``,
UPDATE outbox SET status='failed', locked_until=NULL, last_error=%(b_error)s::VARCHAR, updated_at=now() WHERE outbox.id = %(b_id)s::BIGINT AND outbox.attempt = %(b_attempt)s::INTEGER AND outbox.status = 'processing' AND outbox.locked_by = %(b_worker)s::VARCHAR;

-- claim_statement: Oldest claimable rows, locked with SKIP LOCKED and leased in the same statement.
WITH picked AS
(SELECT outbox.id AS id
FROM outbox
WHERE outbox.status IN ('pending', 'processing') AND (outbox.status = 'pending' AND (outbox.next_retry_at IS NULL OR outbox.next_retry_at <= now()) OR outbox.status = 'processing' AND outbox.locked_until < now()) AND (outbox.ordering_key IS NULL OR NOT (EXISTS (SELECT ahead.id
FROM outbox AS ahead
WHERE ahead.ordering_key = outbox.ordering_key AND ahead.id < outbox.id AND ahead.status != 'sent'))) ORDER BY outbox.id
 LIMIT %(param_1)s::INTEGER FOR UPDATE OF outbox SKIP LOCKED)
 UPDATE outbox SET status='processing', attempt=(outbox.attempt + %(attempt_1)s::INTEGER), locked_by=%(locked_by)s::VARCHAR, locked_until=(now() + %(lease_seconds)s * interval '1 second'), updated_at=now() FROM picked WHERE outbox.id = picked.id RETURNING outbox.id, outbox.event_type, outbox.payload, outbox.headers, outbox.ordering_key, outbox.attempt, outbox.created_at;

-- count_by_status: Rows per status.
SELECT outbox.status, count(*) AS count_1
FROM outbox GROUP BY outbox.status;

-- expired_leases: How many processing rows have an expired lease.
SELECT count(*) AS count_1
FROM outbox
WHERE outbox.status = 'processing' AND outbox.locked_until < now();

-- held: Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`.
SELECT outbox.id
FROM outbox, unnest(%(ids)s::BIGINT[], %(attempts)s::INTEGER[]) AS k(id, attempt)
WHERE outbox.id = ANY (%(ids)s::BIGINT[]) AND outbox.id = k.id AND outbox.attempt = k.attempt AND outbox.status = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR;

-- list_failed: Dead-lettered rows, oldest first.
SELECT outbox.id, outbox.event_type, outbox.attempt, outbox.last_error, outbox.created_at, outbox.updated_at
FROM outbox
WHERE outbox.status = 'failed' ORDER BY outbox.id
 LIMIT %(param_1)s::INTEGER;

-- mark_sent: Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...].
UPDATE outbox SET status='sent', locked_until=NULL, updated_at=now(), sent_at=now() FROM unnest(%(ids)s::BIGINT[], %(attempts)s::INTEGER[]) AS k(id, attempt) WHERE outbox.id = ANY (%(ids)s::BIGINT[]) AND outbox.id = k.id AND outbox.attempt = k.attempt AND outbox.status = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR;

-- oldest_pending_age: Age in seconds of the oldest pending row (NULL when none).
SELECT CAST(EXTRACT(epoch FROM now() - (SELECT min(outbox.created_at) AS min_1
FROM outbox
WHERE outbox.status = 'pending')) AS FLOAT) AS anon_1;

-- purge_failed: Delete failed rows (all, or those in ``ids``).
DELETE FROM outbox WHERE outbox.status = 'failed';

-- purge_sent: Delete up to ``limit`` sent rows older than the retention, oldest first.
DELETE FROM outbox WHERE outbox.id IN (SELECT outbox.id
FROM outbox
WHERE outbox.status = 'sent' AND CAST(EXTRACT(epoch FROM now() - outbox.sent_at) AS FLOAT) > %(param_1)s ORDER BY outbox.id
 LIMIT %(param_2)s::INTEGER);

-- release: Give rows back without spending their attempt (broker unreachable); bind ``keys``,
UPDATE outbox SET status='pending', attempt=(outbox.attempt - %(attempt_1)s::INTEGER), next_retry_at=(now() + %(delay)s * interval '1 second'), locked_by=NULL, locked_until=NULL, last_error=%(error)s::VARCHAR, updated_at=now() FROM unnest(%(ids)s::BIGINT[], %(attempts)s::INTEGER[]) AS k(id, attempt) WHERE outbox.id = ANY (%(ids)s::BIGINT[]) AND outbox.id = k.id AND outbox.attempt = k.attempt AND outbox.status = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR;

-- renew: Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``.
UPDATE outbox SET locked_until=(now() + %(lease_seconds)s * interval '1 second') FROM unnest(%(ids)s::BIGINT[], %(attempts)s::INTEGER[]) AS k(id, attempt) WHERE outbox.id = ANY (%(ids)s::BIGINT[]) AND outbox.id = k.id AND outbox.attempt = k.attempt AND outbox.status = 'processing' AND outbox.locked_by = %(locked_by_1)s::VARCHAR;

-- reschedule: Failed rows with attempts left go back to pending after a per-row delay (executemany:
UPDATE outbox SET status='pending', next_retry_at=(now() + %(b_delay)s * interval '1 second'), locked_by=NULL, locked_until=NULL, last_error=%(b_error)s::VARCHAR, updated_at=now() WHERE outbox.id = %(b_id)s::BIGINT AND outbox.attempt = %(b_attempt)s::INTEGER AND outbox.status = 'processing' AND outbox.locked_by = %(b_worker)s::VARCHAR;

-- retry_failed: Failed rows (all, or those in ``ids``) go back to pending with fresh attempts.
UPDATE outbox SET status='pending', attempt=%(attempt)s::INTEGER, next_retry_at=NULL, locked_by=NULL, locked_until=NULL, updated_at=now() WHERE outbox.status = 'failed';
