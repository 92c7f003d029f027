-- Whether a fact's summed figures exceed what a fact holds (daily_metrics/period_metrics:
-- spend, conversions and results NUMERIC(18,4), impressions and clicks bigint). One place for
-- the limits that ad_metrics.sql's facts_to_prepare (an aggregate per fact) and
-- overflowing_facts (a window per fact) both test (docs/decisions/0530). A plain SQL
-- expression, IMMUTABLE: the planner inlines it where it is called. NULL (a metric the export
-- lacks) is never an overflow.
-- Append-only: once applied anywhere, this file never changes.

CREATE FUNCTION ad_fact_overflows(spend numeric, impressions numeric, clicks numeric,
                                  conversions numeric, results numeric)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$SELECT COALESCE(spend >= 1e13 OR impressions >= 9e18 OR clicks >= 9e18
                     OR conversions >= 1e13 OR results >= 1e13, false)$$;
