-- Alert windows, shared by every process of the fleet (shared/alerts.py). Not tenant data:
-- keys name an incident kind, never a tenant's content.

-- name: claim_window
-- One statement, so two processes claiming at once serialise on the row: exactly one of them
-- opens a new window (send = true). SET expressions all see the old row, so `carried` takes
-- the count of the window that just closed.
INSERT INTO alert_windows AS w (key, last_sent_at, suppressed, carried)
VALUES (%(key)s, now(), 0, 0)
ON CONFLICT (key) DO UPDATE SET
    last_sent_at = CASE WHEN w.last_sent_at <= now() - make_interval(secs => %(window_s)s)
                        THEN now() ELSE w.last_sent_at END,
    suppressed   = CASE WHEN w.last_sent_at <= now() - make_interval(secs => %(window_s)s)
                        THEN 0 ELSE w.suppressed + 1 END,
    carried      = CASE WHEN w.last_sent_at <= now() - make_interval(secs => %(window_s)s)
                        THEN w.suppressed ELSE w.carried END
RETURNING last_sent_at = now() AS send, carried;
