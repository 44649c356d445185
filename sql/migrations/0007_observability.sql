-- Observability: this release adds jobfeed.job_timings (sql/functions/40_claim.sql),
-- which workers call after each claim for their wait and end-to-end histograms.
-- No table changes: the version says the function is there.
select 1;
