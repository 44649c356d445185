-- No DDL: a version for the functions this release adds and its Python calls
-- (drop_schedule at a worker's start, output_discard), so that its processes refuse to start
-- on a database not yet migrated instead of failing there (see README,
-- Versions).
select 1;
