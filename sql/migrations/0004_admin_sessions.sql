-- Admin sessions held by the server, so that signing out revokes the cookie in
-- every API process (the cookie alone would stay valid until it expired).
create table jobfeed.admin_sessions (
    id          uuid primary key default gen_random_uuid(),
    expires_at  timestamptz not null,
    created_at  timestamptz not null default now()
);
revoke all on jobfeed.admin_sessions from public;
