-- No JIT compilation for jobfeed's statements: each is short, and compiling
-- one costs tens to hundreds of milliseconds. On PostgreSQL 15-17 a plan
-- made under a function's enable_seqscan = off (or another enable_* it pins)
-- carries the disabled node's cost penalty, far above jit_above_cost, so a
-- server built with LLVM (Debian's and the PGDG packages are) compiled every
-- claim and submit that took one. PostgreSQL 18 counts disabled nodes apart
-- from the cost. Every function with settings of its own gets jit = off (each
-- entry point has one: its search_path), and what it calls runs under it.
-- Functions without settings are left so: a SET clause would stop the planner
-- from inlining them. Run after every other file (they replace the functions,
-- and with them their settings).
do $$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_proc p
              where p.pronamespace = 'jobfeed'::regnamespace and p.proconfig is not null
                and not 'jit=off' = any (p.proconfig)
    loop
        execute format('alter function %s set jit = off', f);
    end loop;
end
$$;
