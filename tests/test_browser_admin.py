"""The admin's pages in a real browser (see test_browser.py): signing in, the
dashboard's panels against the database, filtering, retrying, pausing a kind,
bulk cancel, and the links between a child job and its parent."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re

from jobfeed.worker.states import STATES

from queue_sql import ATTEMPTS
from servers import ADMIN_TOKEN
from waiting import eventually

from browser_parts import DESKTOP, PHONE, SHOTS, expect, shot
from browser_parts import (  # noqa: F401  (fixtures)
    _need_browser, api, http, new_page, worker)


async def test_admin_signs_in_and_retries_a_failed_job(worker, new_page, http):
    # Run 1 fails permanently; run 2 has no script and completes.
    created = await http.post("/api/jobs", json={"kind": "demo", "target": "doc-7",
                                                 "payload": {"steps": 3, "step_ms": 50, "fail": ["permanent"]}})
    job_id = created.json()["id"]

    async def failed():
        return (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "failed"
    await eventually(failed, what="the job to fail")

    page = await new_page(DESKTOP)
    refused: list[str] = []  # a signed-out visit makes no failing request (none in the console)
    page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
    await page.goto("/admin")
    await expect(page.locator("#signin")).to_be_visible()
    await expect(page.locator("#dashboard")).to_be_hidden()
    assert refused == []
    await page.fill("#token", "not-the-token")
    await page.press("#token", "Enter")
    await expect(page.locator("#signin-error")).to_contain_text("wrong admin token")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#dashboard")).to_be_visible()
    await expect(page.locator("#connection")).to_contain_text("Live")

    # Counts, the chart and the table show the true state and the last error.
    await expect(page.locator('#counts td[data-state="failed"]')).to_have_text("1")
    await expect(page.locator("#chart svg")).to_have_attribute("aria-label", re.compile(r"0 completed, 1 failed"))
    row = page.locator(f'#jobs tr[data-job-id="{job_id}"]')
    await expect(row).to_contain_text("failed")
    await expect(row).to_contain_text("1 / 5")
    await expect(row).to_contain_text("demo_permanent")

    # The detail: every attempt; retry runs it again, live, to completed.
    await row.get_by_role("button", name="Open demo job doc-7").click()
    detail = page.locator("#detail")
    await expect(detail).to_be_focused()
    await expect(page.locator("#attempts tbody tr")).to_have_count(1)
    await expect(page.locator("#attempts tbody")).to_contain_text("permanent")
    await expect(page.locator("#cancel")).to_be_disabled()
    await shot(page, "admin-failed")
    await page.click("#retry")
    await expect(page.locator("#action-message")).to_contain_text("Retry accepted")
    await expect(detail.locator(".badge")).to_have_text("completed")
    await expect(page.locator("#attempts tbody tr")).to_have_count(2)
    await expect(page.locator("#attempts tbody tr").nth(1)).to_contain_text("completed")
    await expect(row.locator(".badge")).to_have_text("completed")
    await expect(page.locator('#counts td[data-state="completed"]')).to_have_text("1")
    await expect(page.locator('#counts td[data-state="failed"]')).to_have_text("0")
    await expect(page.locator("#retry")).to_be_disabled()
    await shot(page, "admin")
    await page.set_viewport_size(PHONE)
    await shot(page, "admin")

    # A session cookie, not the token, keeps the admin signed in.
    await page.reload()
    await expect(page.locator("#dashboard")).to_be_visible()
    await page.click("#signout")
    await expect(page.locator("#signin")).to_be_visible()
    assert [url for url in refused if not url.endswith("/api/admin/session")] == []
    # nothing of the dashboard stays in the page, hidden or not
    await expect(page.locator("#dashboard tbody tr")).to_have_count(0)
    await expect(page.locator("#attempts tbody tr")).to_have_count(0)
    await shot(page, "admin-signin")


async def test_admin_filters_by_state_and_opens_a_linked_job(api, new_page, http):
    """No worker: one job stays queued, one is canceled. The state filter lists
    every true state and narrows the table; #job=ID opens that job's detail."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ids = {}
    for target in ("filter-a", "filter-b"):
        ids[target] = (await http.post("/api/jobs", json={"kind": "demo", "target": target})).json()["id"]
    assert (await http.post(f"/api/admin/jobs/{ids['filter-b']}/cancel", headers=admin)).status_code == 200

    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={ids['filter-b']}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    # the focus was on the form, now hidden: the dashboard's first heading takes it
    await expect(page.locator("#counts-heading")).to_be_focused()
    assert await page.evaluate("document.getElementById('dashboard').contains(document.activeElement)")
    await expect(page.locator("#detail-heading")).to_have_text("demo: filter-b")
    await expect(page.locator("#detail .badge")).to_have_text("canceled")
    await expect(page.locator("#retry")).to_be_enabled()
    await expect(page.locator("#cancel")).to_be_disabled()
    options = await page.locator("#filter-state option").all_inner_texts()
    assert options == ["all", *STATES]
    rows = page.locator("#jobs tbody tr")
    await expect(rows).to_have_count(2)
    await page.select_option("#filter-state", "canceled")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-job-id", ids["filter-b"])
    await page.select_option("#filter-state", "queued")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-job-id", ids["filter-a"])


async def test_admin_list_and_detail_keep_to_the_latest_read(api, new_page, http):
    """From a black-box pass: a slow answer for an earlier filter no longer
    replaces the later filter's rows; a detail read that fails and then works
    again shows no stale error; a long target does not widen the page."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    long_target = "https://example.com/" + "a" * 180
    ids = {}
    for target in ("late-a", "late-b", long_target):
        ids[target] = (await http.post("/api/jobs", json={"kind": "demo", "target": target})).json()["id"]
    assert (await http.post(f"/api/admin/jobs/{ids['late-b']}/cancel", headers=admin)).status_code == 200

    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={ids[long_target]}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text(f"demo: {long_target}")
    assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")

    async def slow(route):  # the answer for "canceled" comes after the one for "queued"
        answer = await route.fetch()
        await page.wait_for_timeout(1500)
        await route.fulfill(response=answer)
    await page.route(re.compile(r"/api/admin/jobs\?.*state=canceled"), slow)
    rows = page.locator("#jobs tbody tr")
    await page.select_option("#filter-state", "canceled")
    await page.select_option("#filter-state", "queued")
    await page.wait_for_timeout(2000)  # past the slow answer
    await expect(rows).to_have_count(2)
    assert "late-b" not in await page.locator("#jobs tbody").inner_text()

    detail = f"**/api/admin/jobs/{ids['late-a']}"
    await page.click(f"tr[data-job-id='{ids['late-a']}'] button")
    await expect(page.locator("#detail-heading")).to_have_text("demo: late-a")
    await page.route(detail, lambda route: route.abort("connectionrefused"))
    assert (await http.post(f"/api/admin/jobs/{ids['late-a']}/cancel", headers=admin)).status_code == 200
    await expect(page.locator("#action-message")).to_contain_text("reach")  # the live event's re-read failed
    await page.unroute(detail)
    assert (await http.post(f"/api/admin/jobs/{ids['late-a']}/retry", headers=admin)).status_code == 200
    await expect(page.locator("#detail .badge")).to_have_text("queued")
    await expect(page.locator("#action-message")).to_be_hidden()



async def test_signing_out_waits_for_the_dashboards_requests_under_way(api, new_page, http):
    """From a CI run: a dashboard signed out right after a reload read its open
    job after the session had ended, a 401 in the console. Signing out now
    stops the dashboard's stream and timers and lets its requests under way
    finish before the session ends. Here the open job's read reaches the
    server a second late, and the sign-out's answer comes two seconds after
    the server ended the session, so the page is still there to ask."""
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "sign-out"})).json()["id"]
    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={job_id}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: sign-out")
    refused: list[str] = []
    page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
    held = asyncio.Event()

    async def late_read(route):
        held.set()
        await page.wait_for_timeout(1000)
        await route.continue_()

    async def late_sign_out_answer(route):
        if route.request.method != "DELETE":
            await route.continue_()
            return
        answer = await route.fetch()  # the session ends now
        await page.wait_for_timeout(2000)
        await route.fulfill(response=answer)
    await page.route(f"**/api/admin/jobs/{job_id}", late_read)
    await page.route("**/api/admin/session", late_sign_out_answer)
    await page.reload()
    await asyncio.wait_for(held.wait(), 10)
    await page.click("#signout")
    await expect(page.locator("#signin")).to_be_visible(timeout=10_000)
    assert refused == []

async def test_dashboard_panels_match_the_database(worker, new_page, http, pool):
    """A live worker running one long job and a planted worker silent for more
    than two leases: the panel shows each as the database has it, live or lost.
    The charts (depth samples, some planted earlier in the hour; wait p50/p95;
    failures by code) show the numbers jobfeed.charts() gives."""
    await pool.execute("select jobfeed.worker_beat('gone-host:1:old', 'gone-host', array['demo'], 2, 1, "
                       "'1 second', now() - interval '10 seconds')")
    finished = []
    for target, payload in (("ok-1", {"steps": 1}), ("ok-2", {"steps": 2}), ("bad-1", {"fail": ["permanent"]})):
        finished.append((await http.post("/api/jobs", json={"kind": "demo", "target": target,
                                                            "payload": payload})).json()["id"])

    async def all_finished():
        states = [(await http.get(f"/api/jobs/{i}")).json()["status"] for i in finished]
        return all(s in ("completed", "failed") for s in states)
    await eventually(all_finished, what="the short jobs to finish")
    for minutes, queued in ((45, 3), (30, 7), (15, 2)):
        await pool.execute("insert into jobfeed.depth_samples values (now() - make_interval(mins => $1), 'demo', $2, 1)",
                           minutes, queued)
    created = await http.post("/api/jobs", json={"kind": "demo", "target": "long-1",
                                                 "payload": {"steps": 300, "step_ms": 100}})
    assert created.status_code == 201

    async def running():
        listed = json.loads(await pool.fetchval("select jobfeed.list_workers()::text"))
        return listed if any(w["running"] == 1 and not w["lost"] for w in listed) else None
    workers = await eventually(running, what="the worker to report its running job")
    assert len(workers) == 2 and sum(w["lost"] for w in workers) == 1

    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#connection")).to_contain_text("Live")
    await expect(page.locator("#workers tbody tr")).to_have_count(len(workers))
    for w in workers:
        row = page.locator(f'#workers tr[data-worker="{w["id"]}"]')
        await expect(row.locator('[data-field="running"]')).to_have_text(str(w["running"]))
        await expect(row.locator('[data-field="concurrency"]')).to_have_text(str(w["concurrency"]))
        await expect(row.locator('[data-field="status"]')).to_have_text("lost" if w["lost"] else "live")
        await expect(row).to_contain_text(", ".join(w["kinds"]))
    await expect(page.locator("#workers-summary")).to_have_text(
        "1 live, 1 lost; 1 running of 4 slots.")
    running_in_db = await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running'")
    await expect(page.locator('#counts td[data-state="running"]')).to_have_text(str(running_in_db))
    await expect(page.locator("#finished-note")).to_be_hidden()  # a short history: counted each time
    # As if counting the finished jobs had taken 100 s: the next read keeps them, and says since when.
    kept = await pool.fetchval("update jobfeed.stats_snapshot set as_of = as_of - interval '1 minute', "
                               "finished_as_of = finished_as_of - interval '1 minute', finished_seconds = 100 "
                               "returning finished_as_of")
    note = page.locator("#finished-note")
    await expect(note).to_be_visible(timeout=15000)
    shown = await note.locator("time").get_attribute("datetime")
    assert dt.datetime.fromisoformat(shown) == kept, (shown, kept)

    charts = json.loads(await pool.fetchval("select jobfeed.charts()::text"))
    [failure] = charts["failures"]
    assert (failure["code"], failure["jobs"]) == ("demo_permanent", 1)
    await expect(page.locator(f'#failures-table tr[data-code="{failure["code"]}"] [data-field="jobs"]')).to_have_text(
        str(failure["jobs"]))
    [wait] = charts["wait"]
    assert wait["jobs"] == 3
    wait_row = page.locator('#wait-table tr[data-kind="demo"]')
    await expect(wait_row.locator('[data-field="p50"]')).to_have_attribute("data-value", f"{wait['p50']:.3f}")
    await expect(wait_row.locator('[data-field="p95"]')).to_have_attribute("data-value", f"{wait['p95']:.3f}")
    await expect(wait_row.locator('[data-field="jobs"]')).to_have_text("3")
    depth = [s for s in charts["depth"] if s["kind"] == "demo"]
    await expect(page.locator("#depth-chart svg")).to_have_attribute(
        "aria-label", f"Queued now by kind: demo {depth[-1]['queued']}; peak 7.")
    points = await page.locator('#depth-chart polyline[data-kind="demo"]').get_attribute("points")
    assert len(points.split()) == len(depth)
    await shot(page, "dashboard")

    # The failed job's detail: its attempts on a time line, as the database logged them.
    outcomes = [r["outcome"] for r in await pool.fetch(
        f"select outcome from {ATTEMPTS} a where job_id = $1::uuid order by generation", finished[2])]
    assert outcomes == ["permanent"]
    await page.locator(f'#jobs tr[data-job-id="{finished[2]}"] button').click()
    # the detail's read (drawn with its time line) took past the default 5 s once on a
    # loaded CI machine: waited for longer, and apart, so a failure says which of the two
    await expect(page.locator("#detail-heading")).to_have_text("demo: bad-1", timeout=15_000)
    bars = page.locator('#timeline rect[data-part="attempt"]')
    await expect(bars).to_have_count(len(outcomes))
    assert [await bars.nth(i).get_attribute("data-outcome") for i in range(len(outcomes))] == outcomes
    await expect(page.locator('#timeline rect[data-part="queued"]')).to_have_count(1)
    await page.locator("#timeline").screenshot(path=SHOTS / "dashboard-timeline.png")


async def test_admin_pauses_a_kind_sees_schedules_and_cancels_in_bulk(api, new_page, http, pool):
    """Flow control on the dashboard: pause and resume a kind, the periodic
    schedules with their next run, and a bulk cancel that says how many jobs
    it will cancel before it is confirmed."""
    for n in range(3):
        assert (await http.post("/api/jobs", json={"kind": "demo", "target": f"bulk-{n}"})).status_code == 201
    await pool.execute("select jobfeed.register_kind('nightly')")
    await pool.execute("select jobfeed.register_schedule('nightly', '0 3 * * *', 'Europe/Paris', null)")

    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")

    demo = page.locator('#kinds tr[data-kind="demo"]')
    await demo.get_by_role("button", name="Pause demo").click()
    await expect(demo.locator(".badge")).to_have_text("paused")
    kinds = {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}
    assert kinds["demo"]["paused"] is True
    await demo.get_by_role("button", name="Resume demo").click()
    await expect(demo.get_by_role("button", name="Pause demo")).to_be_visible()
    assert {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}["demo"]["paused"] is False
    # paused elsewhere (the CLI, another admin): the open page shows it too
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    # the page reads kinds again every 5 s (FLOW_EVERY_MS): two rounds and some slack, as a
    # 5 s wait, the expect's default, raced the poll on a loaded machine
    seen = 12_000
    assert (await http.post("/api/admin/kinds/demo/pause", headers=admin)).status_code == 200
    await expect(demo.locator(".badge")).to_have_text("paused", timeout=seen)
    assert (await http.post("/api/admin/kinds/demo/resume", headers=admin)).status_code == 200
    await expect(demo.get_by_role("button", name="Pause demo")).to_be_visible(timeout=seen)

    schedule = page.locator("#schedules tbody tr")
    await expect(schedule).to_have_count(1)
    await expect(schedule.first).to_contain_text("0 3 * * * (Europe/Paris)")
    await expect(schedule.first).to_contain_text("never")
    await shot(page, "admin-flow")

    await page.select_option("#filter-kind", "demo")
    await page.select_option("#filter-state", "queued")
    await page.click("#bulk-cancel")
    await expect(page.locator("#bulk-question")).to_have_text("Cancel 3 jobs (demo, queued)?")
    await page.click("#bulk-no")  # nothing happens
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'canceled'") == 0
    await page.click("#bulk-cancel")
    await page.click("#bulk-yes")
    await expect(page.locator("#bulk-message")).to_have_text("Canceled 3 jobs.")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'canceled'") == 3
    await expect(page.locator("#jobs tbody tr")).to_have_count(0)

    # A new job holds bulk-0's target: retrying the canceled ones leaves that one
    # alone, and the answer says so (it said "Retried 2 jobs" after asking about 3).
    assert (await http.post("/api/jobs", json={"kind": "demo", "target": "bulk-0"})).status_code == 201
    await page.select_option("#filter-state", "canceled")
    await expect(page.locator('#counts td[data-state="canceled"]')).to_have_text("3")  # the counts asked are these
    await page.click("#bulk-retry")
    await expect(page.locator("#bulk-question")).to_contain_text("Retry 3 jobs (demo, canceled)? Any whose target")
    await page.click("#bulk-yes")
    await expect(page.locator("#bulk-message")).to_have_text(
        "Retried 2 jobs; skipped 1 (a newer unfinished job holds the target, or the job changed meanwhile).")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'canceled'") == 1


async def test_admin_detail_links_a_child_and_its_parent_both_ways(api, new_page, http, pool):
    """No worker: a parent is claimed and completed by hand with one child
    (ctx.submit's SQL); the child's detail shows its parent as a link that
    opens the parent's detail, which lists the child (with its state) as a
    link back."""
    from jobfeed.worker.queue import Queue

    queue = Queue(pool)
    parent = (await http.post("/api/jobs", json={"kind": "demo", "target": "parent"})).json()["id"]
    (claimed,) = await queue.claim(["demo"], 1, "by-hand")
    child = await queue.child_id(claimed.id, claimed.generation, "demo", "child", {})
    assert await queue.complete_spawning(claimed.id, claimed.generation, None,
                                         [{"id": str(child), "kind": "demo", "target": "child", "payload": {}}])
    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={child}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: child")
    link = page.locator("#detail-facts a", has_text=parent)
    await link.click()
    await expect(page.locator("#detail-heading")).to_have_text("demo: parent")
    await expect(page.locator("#detail-facts dd > .badge")).to_have_text("completed")
    assert page.url.endswith(f"#job={parent}")
    listed = page.locator("#detail-facts .children li")
    await expect(listed).to_have_count(1)
    await expect(listed.locator(".badge")).to_have_text("queued")
    await listed.locator("a", has_text="demo: child").click()
    await expect(page.locator("#detail-heading")).to_have_text("demo: child")
    assert page.url.endswith(f"#job={child}")


async def test_long_kind_names_and_errors_keep_the_dashboard_in_its_width(api, new_page, http, pool):
    """A 48-character kind name widened the page on a phone (and hid the
    counts' columns on a desktop); an 8,000-character error made its row
    thousands of pixels tall. Names now break; a row shows the start of the
    error, the detail all of it in a box that scrolls."""
    from jobfeed.worker.queue import Queue
    kind = "akindwhosenamegoesonandon" + "x" * 23  # no place to break
    queue = Queue(pool)
    await queue.register_kind(kind, max_attempts=1, lease=30.0, backoff=(1.0,))
    job_id = (await queue.submit(kind, "long-error")).id
    (job,) = await queue.claim([kind], 1, "w")
    await queue.fail_permanent(job.id, job.generation, "broken", "why " * 2000)
    await queue.submit(kind, "queued-one")

    for viewport in (PHONE, DESKTOP):
        page = await new_page(viewport)
        await page.goto(f"/admin#job={job_id}")
        await page.fill("#token", ADMIN_TOKEN)
        await page.press("#token", "Enter")
        row = page.locator(f'#jobs tbody tr[data-job-id="{job_id}"]')
        await expect(row).to_contain_text("broken: why")
        await expect(page.locator("#detail-heading")).to_have_text(f"{kind}: long-error")
        await expect(page.locator("#kinds").get_by_text(kind)).to_be_visible()
        await shot(page, "dashboard-long-names")
        assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth"), viewport
        assert (await row.bounding_box())["height"] < 600, viewport
        box = await page.locator("#detail .long-text").first.bounding_box()
        assert box["height"] < 400, viewport
        await page.close()


async def test_a_targets_bidi_controls_are_shown_written_out(api, new_page, http):
    """U+202E reverses what follows it: "x\u202egnp.exe" read as "xexe.png" in
    the list, the detail and the job page. Each control is written out."""
    target = "x\u202egnp.exe"
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": target})).json()["id"]
    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={job_id}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: x\\u202egnp.exe")
    await expect(page.locator(f'#jobs tbody tr[data-job-id="{job_id}"]')).to_contain_text("x\\u202egnp.exe")
    job_page = await new_page()
    await job_page.goto(f"/jobs/{job_id}")
    await expect(job_page.locator("#target")).to_have_text("x\\u202egnp.exe")
    assert "\u202e" not in await job_page.title()


async def test_the_dashboards_actions_keep_a_keyboard_users_place(api, new_page, http, queue):
    """From a black-box pass: after Space on Pause the focus fell to the page's
    body (the row was made anew), Escape left the bulk question open and its
    answers dropped focus too, a canceled job's detail dropped it with its
    disabled button, and the open job's state changes were never announced."""
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "keys"})).json()["id"]
    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={job_id}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: keys")

    await page.locator('#kinds tr[data-kind="demo"] button').focus()
    await page.keyboard.press("Space")
    await expect(page.locator('#kinds tr[data-kind="demo"] .badge')).to_have_text("paused")
    await expect(page.get_by_role("button", name="Resume demo")).to_be_focused()  # the new button, not the body
    await page.keyboard.press("Space")
    await expect(page.get_by_role("button", name="Pause demo")).to_be_visible()
    await expect(page.get_by_role("button", name="Pause demo")).to_be_focused()

    await page.select_option("#filter-kind", "demo")
    await page.locator("#bulk-cancel").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#bulk-confirm")).to_be_visible()
    await expect(page.locator("#bulk-yes")).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(page.locator("#bulk-confirm")).to_be_hidden()
    await expect(page.locator("#bulk-cancel")).to_be_focused()  # back where it was asked

    # the open job is claimed elsewhere: its state change is said, once
    (job,) = await queue.claim(["demo"], 1, "w", lease=3600)
    await expect(page.locator("#detail-live")).to_have_text("demo: keys is now running.", timeout=12_000)
    await page.locator("#cancel").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#action-message")).to_contain_text("Cancel accepted")
    await expect(page.locator("#cancel")).to_be_disabled()
    await expect(page.locator("#action-message")).to_be_focused()  # what says what happened
    await expect(page.locator("#detail-live")).to_have_text("demo: keys is now canceled.")
