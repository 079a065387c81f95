// browser.mjs - the buyer's and the admin's pages in headless Chromium
// (Debian's chromium, driven by playwright-core) against the real
// seckilld, MariaDB and Redis.
//
// The buyer's flow runs in a browser whose clock is an hour fast, so the
// countdown and the buy button can only be right if they follow the
// server's clock (the Date header). The instance asks for a proof of work
// before a login code, at the default size (SECKILL_POW_MAXNUMBER=100000),
// so the page must solve it as a buyer's would. A queue sale runs on an
// instance of its own that admits 2 places a second, so that a buyer's
// wait can be seen. Every page must run without a console error or a
// Content-Security-Policy report. Screenshots of both pages at phone and
// desktop width go to build/screenshots/.

import { createHash } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";

import {
    BIN,
    ROOT,
    RUN,
    adminAdd,
    assert,
    assertEqual,
    createVoucher,
    http,
    mysql,
    redis,
    sql,
    start,
    startSeckilld,
    stop,
    stopAll,
    summary,
    test,
    timeIn,
    token,
    tokens,
} from "./lib.mjs";
import { DESKTOP, PHONE, assertNoProblems, launchChromium, newPage, waitFor } from "./pages.mjs";

const SHOTS = path.join(ROOT, "build/screenshots");
// The narrowest phone the pages are made for.
const NARROW = { width: 360, height: 740 };
// Where the admin's page keeps its session (web/static/admin.js).
const ADMIN_SESSION_KEY = "seckill.admin-session";
// The browser's clock runs this much ahead of the server's.
const SKEW_MS = 3600 * 1000;
// The service's default size of a proof of work, which this instance uses.
const POW_MAXNUMBER = 100000;

let server;
let browser;

// Make the page's clock (Date and performance.timeOrigin) run skewMs ahead.
async function skewClock(page, skewMs) {
    await page.addInitScript((skew) => {
        const RealDate = Date;
        class SkewedDate extends RealDate {
            constructor(...args) {
                if (args.length === 0) super(RealDate.now() + skew);
                else super(...args);
            }
            static now() {
                return RealDate.now() + skew;
            }
        }
        globalThis.Date = SkewedDate;
        const origin = performance.timeOrigin + skew;
        Object.defineProperty(performance, "timeOrigin", { get: () => origin });
    }, skewMs);
}

async function shoot(page, name) {
    for (const [label, size] of [
        ["phone", PHONE],
        ["desktop", DESKTOP],
    ]) {
        await page.setViewportSize(size);
        await page.waitForTimeout(300); // a repaint after the resize
        await page.screenshot({ path: path.join(SHOTS, `${name}-${label}.png`), fullPage: true });
    }
}

const card = (page, id) => page.locator(`li.voucher[data-voucher-id="${id}"]`);

// The solution in a Seckill-PoW header: {algorithm, challenge, number,
// salt, signature}.
function powSolution(header) {
    return JSON.parse(Buffer.from(header, "base64").toString("utf8"));
}

// True when solution answers its challenge: SHA-256 of salt + number.
function powSolves(s) {
    return createHash("sha256").update(s.salt + String(s.number)).digest("hex") === s.challenge;
}

const isCodeRequest = (r) => r.method() === "POST" && new URL(r.url()).pathname === "/api/auth/code";

// Log in through the page with phone (development mode shows the code),
// on the instance at base. Returns the Seckill-PoW header of each code
// request the page sent (undefined for one without).
async function logIn(page, phone, base = server.url) {
    const sent = [];
    const seen = (r) => {
        if (isCodeRequest(r)) sent.push(r.headers()["seckill-pow"]);
    };
    page.on("request", seen);
    await page.fill("#phone", phone);
    await page.click("#send-code");
    await waitFor(() => page.isVisible("#dev-code"), "the development code");
    page.off("request", seen);
    const code = await page.textContent("#dev-code-value");
    assert(/^[0-9]{6}$/.test(code), `dev code ${code}`);
    assertEqual(await page.inputValue("#code"), code, "the code field");
    assert(await page.isHidden("#pow"), "the proof of work's bar is gone");
    assert(await page.isEnabled("#send-code"), "the send button is back");
    await page.click("#login-button");
    await waitFor(() => page.isVisible("#who"), "the logged-in header");
    assertEqual(await page.textContent("#who-phone"), "+86" + phone, "the phone shown (E.164)");
    assert(await page.isVisible("#orders"), "my orders are shown");
    assert(await page.isHidden("#login"), "the login form is hidden");
    // The session the page keeps is one the API takes.
    const session = await page.evaluate(() => JSON.parse(localStorage.getItem("seckill.session")));
    const mine = await http(base, "GET", "/api/orders?limit=1", { token: session.token });
    assertEqual(mine.status, 200, "GET /api/orders with the page's session");
    return sent;
}

// ---- the buyer ----

async function buyerFlow() {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    await skewClock(page, SKEW_MS);
    const shop = 800000 + (RUN % 100000);
    const phone = "137" + String(RUN % 100000000).padStart(8, "0");

    // One regular voucher and one already on sale, before the page loads.
    const normal = await createVoucher(server.url, { shopId: shop, title: "10 off any meal", payValue: 900, actualValue: 1000 });
    const spare = await createVoucher(server.url, {
        shopId: shop,
        title: "Two left: 20 off",
        payValue: 8000,
        actualValue: 10000,
        type: "seckill",
        stock: 2,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    });
    const last = await createVoucher(server.url, {
        shopId: shop,
        title: "Last one: 90 off",
        payValue: 1000,
        actualValue: 10000,
        type: "seckill",
        stock: 1,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    });
    const resp = await page.goto(`${server.url}/?shop=${shop}`);
    assertEqual(resp.status(), 200, "GET /");
    assert(/default-src 'self'/.test(resp.headers()["content-security-policy"] || ""), "the page has a CSP");
    await waitFor(() => card(page, last).isVisible(), "the vouchers");
    assert(
        /Regular voucher/.test(await card(page, normal).textContent()) && !(await card(page, normal).locator("button").isVisible()),
        "a regular voucher has no buy button",
    );

    // The login code needed a proof of work: the page solved it, and the
    // service spent it (good once, on every instance).
    const sent = await logIn(page, phone);
    assertEqual(sent.length, 1, "code requests");
    assert(sent[0], "the code request carried no Seckill-PoW");
    const solution = powSolution(sent[0]);
    assert(powSolves(solution), `the page's solution does not solve its challenge: ${JSON.stringify(solution)}`);
    assertEqual(redis("EXISTS", `pow:spent:${solution.challenge}`).trim(), "1", "the proof of work spent in Redis");

    // A sale that starts in 3 s on the server's clock; the browser's clock
    // says it started an hour ago.
    const begin = Math.ceil(Date.now() / 1000 + 3) * 1000;
    const soon = await createVoucher(server.url, {
        shopId: shop,
        title: "Flash: 50 off 47.50",
        subTitle: "today only",
        rules: "one per person",
        payValue: 4750,
        actualValue: 5000,
        type: "seckill",
        stock: 5,
        beginTime: new Date(begin).toISOString().replace(/\.\d{3}Z$/, "Z"),
        endTime: timeIn(3600),
    });
    await page.click("#shop-form button");
    const button = card(page, soon).locator("button.buy");
    await waitFor(() => button.isVisible(), "the new voucher");
    const before = Date.now();
    assert(before < begin, "the page showed the voucher after its sale began: the test machine is too slow");
    assert(await button.isDisabled(), "the buy button is enabled before the sale starts");
    assert(/^Starts in [0-4] s$/.test(await button.textContent()), `the countdown: ${await button.textContent()}`);

    await waitFor(() => button.isEnabled(), "the buy button to open");
    const opened = Date.now();
    assert(opened >= begin, `the button opened ${begin - opened} ms before the sale`);
    assertEqual(await button.textContent(), "Buy now", "the open button");

    // The purchase is held in flight: the button must be disabled and a
    // second click must not send a second request.
    let purchases = 0;
    let release;
    const held = new Promise((r) => (release = r));
    await page.route(`**/api/vouchers/${soon}/seckill`, async (route) => {
        purchases++;
        await held;
        await route.continue();
    });
    await button.click();
    await waitFor(() => button.isDisabled(), "the button to close while buying");
    assertEqual(await button.textContent(), "Buying…", "the button in flight");
    await button.dispatchEvent("click");
    release();
    const msg = card(page, soon).locator(".msg");
    const bought = await waitFor(async () => /Bought! Order (\d+)\./.exec(await msg.textContent()), "the purchase's outcome");
    assertEqual(purchases, 1, "purchase requests for one click and one click while in flight");
    await page.unroute(`**/api/vouchers/${soon}/seckill`);
    const orderId = bought[1];

    // My orders: the new one with its voucher's title and status, and
    // the time left to pay on the server's clock (15 minutes; the
    // browser's clock would say it ran out an hour ago).
    const order = page.locator(`#order-list li[data-order-id="${orderId}"]`);
    await waitFor(() => order.isVisible(), "the order in my orders");
    const orderText = await order.textContent();
    assert(/Flash: 50 off 47\.50/.test(orderText) && /Unpaid/.test(orderText), `the order reads: ${orderText}`);
    const left = await order.locator(".countdown").textContent();
    assert(/^Pay within 1[45] min [0-5][0-9] s, by /.test(left), `the time to pay: ${left}`);
    assert(/47\.50/.test(await order.locator(".amount").textContent()), `the order's amount: ${await order.locator(".amount").textContent()}`);

    // Bought: the card's button leads to the order instead of buying
    // again, and the card names the order, its amount and time to pay.
    await waitFor(async () => (await button.textContent()) === "View my order", "View my order");
    const mine = card(page, soon).locator("a.mine");
    assertEqual(await mine.getAttribute("href"), `#order-${orderId}`, "the card's link to the order");
    assert(
        /^Your order: pay \D*47\.50\D* within 1[45] min \d\d s$/.test(await mine.textContent()),
        `the card's order line: ${await mine.textContent()}`,
    );
    await button.click();
    await waitFor(async () => (await focused(page)) === `order-${orderId}`, "the order focused");

    // Sold out: someone else takes the last one; once the list is read
    // again the card says so and its button is disabled.
    const other = await http(server.url, "POST", `/api/vouchers/${last}/seckill`, { token: token(9300000000 + RUN) });
    assertEqual(other.status, 201, "the other buyer's purchase");
    await waitFor(async () => /Sold out/.test(await card(page, last).locator(".pill").textContent()), "the sold-out pill");
    const lastButton = card(page, last).locator("button.buy");
    await waitFor(async () => (await lastButton.isDisabled()) && (await lastButton.textContent()) === "Sold out", "the sold-out button");

    // The page as a buyer sees it mid-sale: an unpaid order counting down.
    await shoot(page, "buyer");
    await page.setViewportSize(DESKTOP);

    // Pay it (development mode's simulated provider).
    await order.locator("button.pay").click();
    await waitFor(async () => (await order.locator(".status").textContent()) === "Paid", "the order paid");
    assertEqual(await order.locator("button").count(), 0, "buttons on a paid order");

    // Buy another and cancel it: its unit goes back on sale.
    const spareCard = card(page, spare);
    await spareCard.locator("button.buy").click();
    const other2 = await waitFor(
        async () => /Bought! Order (\d+)\./.exec(await spareCard.locator(".msg").textContent()),
        "the second purchase",
    );
    await waitFor(async () => /^1 left$/.test(await spareCard.locator(".row span:last-child").textContent()), "1 left");
    const order2 = page.locator(`#order-list li[data-order-id="${other2[1]}"]`);
    await waitFor(() => order2.locator("button.cancel").isVisible(), "the cancel button");
    // A cancel is asked again: "Keep it" keeps the order.
    await order2.locator("button.cancel").click();
    assertEqual(await page.evaluate(() => document.activeElement.textContent), "Keep it", "the focus while asking");
    await order2.getByRole("button", { name: "Keep it" }).click();
    await page.waitForTimeout(300);
    assertEqual(await order2.locator(".status").textContent(), "Unpaid", "the order after Keep it");
    await order2.locator("button.cancel").click();
    await order2.getByRole("button", { name: "Yes, cancel it" }).click();
    await waitFor(async () => (await order2.locator(".status").textContent()) === "Cancelled", "the order cancelled");
    await waitFor(async () => /^2 left$/.test(await spareCard.locator(".row span:last-child").textContent()), "2 left again");
    // The card offers the voucher again, and no longer says "Bought!".
    await waitFor(async () => (await spareCard.locator("button.buy").textContent()) === "Buy now", "Buy now after the cancel");
    assertEqual(await spareCard.locator(".msg").textContent(), "", "the card's message after the cancel");

    // The clock line: plain words, and the browser's clock an hour fast.
    const clockText = await page.textContent("#clock");
    assert(/countdowns follow the shop's clock\. This device's clock is 1 h 00 min fast\.$/.test(clockText), `the clock line: ${clockText}`);
    const offset = await page.evaluate(async () => {
        const { clock } = await import("/static/api.js");
        return clock.now() - Date.now();
    });
    assert(Math.abs(offset + SKEW_MS) < 5000, `the page's server clock is off by ${offset + SKEW_MS} ms`);

    assertNoProblems(page);
    await context.close();
}

// ---- a queue sale ----

// An RFC 3339 UTC time of epoch ms t (whole seconds).
function iso(t) {
    return new Date(Math.floor(t / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

// The Seckill-PoW value for a challenge of GET /api/pow, found here (for
// buyers who join through the API rather than a page).
function solveHere(c) {
    for (let number = 0; number <= c.maxnumber; number++) {
        const s = { algorithm: c.algorithm, challenge: c.challenge, number, salt: c.salt, signature: c.signature };
        if (powSolves(s)) return Buffer.from(JSON.stringify(s)).toString("base64");
    }
    throw new Error(`no number solves ${JSON.stringify(c)}`);
}

// Join the waiting room of voucher through the API as the holder of tok,
// with the proof of work the instance at base asks for.
async function joinByApi(base, voucher, tok) {
    const c = (await http(base, "GET", "/api/pow")).json;
    const headers = c.maxnumber > 0 ? { "Seckill-PoW": solveHere(c) } : {};
    return http(base, "POST", `/api/vouchers/${voucher}/queue`, { token: tok, headers });
}

// The text a card's place line shows.
const placeText = (page, id) => card(page, id).locator(".place").textContent();

// A queue sale on an instance that admits 2 places a second and opens
// its rooms 300 s before the begin (the page assumes the default 600
// until told otherwise). The buyer logs in through the page, joins
// before the begin (a proof of work solved), reloads the page (the place
// is read again, not joined again), sees the place drawn and the wait,
// and is admitted; the page buys once with the ticket, and the order is
// the buyer's only one for the voucher. The place is read no more than
// once a second and no more once bought; the live region says the place
// at most every few seconds and the admission once. An open sale keeps
// its "Buy now"; a room joined too early says when it opens; Log out
// ends the token on the server.
async function buyerQueue() {
    const rate = 2;
    const inst = await startSeckilld("browser-seckilld-queue", {
        ...MAIN_ENV,
        SECKILL_WAITROOM_ADMIT_RATE: String(rate),
        SECKILL_WAITROOM_OPEN_S: "300",
    });
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    // What the cards' live regions say, with the time, across reloads.
    await page.addInitScript(() => {
        window.said = [];
        new MutationObserver((changes) => {
            for (const m of changes) {
                const n = m.target.nodeType === Node.TEXT_NODE ? m.target.parentNode : m.target;
                if (n && n.matches && n.matches(".voucher [aria-live]") && n.textContent)
                    window.said.push({ t: Date.now(), id: n.closest(".voucher").dataset.voucherId, text: n.textContent });
            }
        }).observe(document, { subtree: true, childList: true, characterData: true });
    });
    // A shop of its own: the other tests' are below 1,000,000.
    const shop = 9100000 + (RUN % 100000);
    const phone = "134" + String(RUN % 100000000).padStart(8, "0");
    try {
        const openTitle = "Open sale: 30 off";
        const open = await createVoucher(inst.url, {
            shopId: shop,
            title: openTitle,
            type: "seckill",
            stock: 5,
            beginTime: timeIn(-60),
            endTime: timeIn(3600),
        });
        // Its room opens in about 100 s (300 s before the begin): the
        // voucher says when (queueOpensAt).
        const early = await createVoucher(inst.url, {
            shopId: shop,
            title: "Queue later: 20 off",
            type: "seckill",
            stock: 5,
            beginTime: timeIn(400),
            endTime: timeIn(3600),
            admission: "queue",
        });
        await page.goto(`${inst.url}/?shop=${shop}`);
        await waitFor(() => card(page, early).isVisible(), "the vouchers");
        await logIn(page, phone, inst.url);

        // An open sale's card: "Buy now", named with the voucher.
        const buyOpen = page.getByRole("button", { name: `Buy now ${openTitle}` });
        await waitFor(() => buyOpen.isEnabled(), "the open sale's button");
        assertEqual(await card(page, open).locator("button.buy").textContent(), "Buy now", "the open sale's button");

        // Before its room opens, the button waits, counting down.
        await waitFor(
            async () => /^Queue opens in 1 min [0-4]\d s$/.test(await card(page, early).locator("button").textContent()),
            "the early sale's button",
        );
        assert(await card(page, early).locator("button").isDisabled(), "the early sale's button is enabled");
        assert(/^The waiting room opens at /.test(await placeText(page, early)), `the early sale's line: ${await placeText(page, early)}`);

        // The queue sale: it begins in 10 s.
        const title = "Queue: 60 off";
        const begin = Math.ceil(Date.now() / 1000 + 10) * 1000;
        const qv = await createVoucher(inst.url, {
            shopId: shop,
            title,
            type: "seckill",
            stock: 3,
            beginTime: iso(begin),
            endTime: timeIn(3600),
            admission: "queue",
        });
        const requests = [];
        page.on("request", (r) => {
            const u = new URL(r.url());
            if (u.pathname.startsWith(`/api/vouchers/${qv}/`))
                requests.push({ method: r.method(), path: u.pathname, t: Date.now(), headers: r.headers() });
        });
        await page.click("#shop-form button");
        const join = page.getByRole("button", { name: `Join the queue ${title}` });
        await waitFor(() => join.isEnabled(), "the join button");
        assertEqual(await card(page, qv).getByRole("button", { name: /Buy now/ }).count(), 0, "a Buy now on a queue sale");
        await join.click();
        const drawnLater = /^You're in the queue\. Places are drawn when the sale starts \(in (\d|10) s\)\.$/;
        await waitFor(async () => drawnLater.test(await placeText(page, qv)), "in the queue before the begin");
        assert(Date.now() < begin, "the page joined after the begin: the machine is too slow for this test");
        const joins = requests.filter((r) => r.method === "POST" && r.path.endsWith("/queue"));
        assertEqual(joins.length, 1, "join requests");
        const pow = joins[0].headers["seckill-pow"];
        assert(pow && powSolves(powSolution(pow)), "the join carried no solved proof of work");
        assertEqual(await card(page, qv).locator("button").textContent(), "In the queue", "the button once joined");
        assert(await card(page, qv).locator("button").isDisabled(), "the button is enabled once joined");

        // Ten places ahead of the buyer's, put straight into the room's
        // sorted set with scores below any a joiner draws (0 to 2^52-1):
        // the buyer's place is the 11th, admitted 5.5 s after the begin.
        const ahead = 10;
        redis("ZADD", `{v:${qv}}:wr:pre`, ...Array.from({ length: ahead }, (_, i) => [String(-1 - i), `ahead-${i}`]).flat());

        // A reload reads the place again; it does not join again.
        const reloadedAt = requests.length;
        await page.reload();
        await waitFor(
            async () => /^(You're in the queue\. Places are|Place \d+ of the queue)/.test(await placeText(page, qv)),
            "the place read again after the reload",
        );
        const since = () => requests.slice(reloadedAt);
        assert(since().some((r) => r.method === "GET" && r.path.endsWith("/queue")), "no read of the place after the reload");
        assert(!since().some((r) => r.method === "POST"), "the page joined again after the reload");
        // What the early join taught the page is kept in the tab too.
        const earlyAgain = await card(page, early).locator("button").textContent();
        assert(/^Queue opens in 1 min [0-4]\d s$/.test(earlyAgain), `the early sale's button after the reload: ${earlyAgain}`);

        // The place once drawn, and the wait.
        await waitFor(async () => /^Place 11 of the queue — about \d+ s$/.test(await placeText(page, qv)), "place 11 and its wait");
        assert(Date.now() >= begin, "a place before the begin");

        // The waiting card fits a 360 px phone.
        await page.setViewportSize(NARROW);
        const fits = await page.evaluate((id) => {
            const c = document.querySelector(`li.voucher[data-voucher-id="${id}"]`);
            const right = (n) => n.getBoundingClientRect().right;
            return {
                page: document.documentElement.scrollWidth,
                card: right(c),
                button: right(c.querySelector("button")),
                place: right(c.querySelector(".place")),
            };
        }, qv);
        assert(Object.values(fits).every((x) => x <= NARROW.width), `the queue card at ${NARROW.width} px: ${JSON.stringify(fits)}`);
        await shoot(page, "buyer-queue");
        await page.setViewportSize(DESKTOP);

        // Admitted: the page buys once, with the ticket, and says so.
        const msg = card(page, qv).locator(".msg");
        const bought = await waitFor(
            async () => /^Bought for you when your turn came: order (\d+)\.$/.exec(await msg.textContent()),
            "the purchase once admitted",
        );
        const boughtAt = Date.now();
        const buys = requests.filter((r) => r.method === "POST" && r.path.endsWith("/seckill"));
        assertEqual(buys.length, 1, "purchase requests");
        assert(/^[A-Za-z0-9_-]{76}$/.test(buys[0].headers["seckill-ticket"] || ""), "the purchase carried no ticket");
        const admittedAt = begin + Math.ceil(((ahead + 1) * 1000) / rate);
        assert(buys[0].t >= admittedAt - 50, `the page bought ${admittedAt - buys[0].t} ms before its place was admitted`);
        // Bought, and once My orders has the order, the way to it.
        await waitFor(async () => (await card(page, qv).locator("button").textContent()) === "View my order", "the button once bought");

        // The order in My orders, and the buyer's only one for the sale
        // in MySQL (GET /api/orders reads the orders table).
        const order = page.locator(`#order-list li[data-order-id="${bought[1]}"]`);
        await waitFor(() => order.isVisible(), "the order in my orders");
        const orderText = await order.textContent();
        assert(orderText.includes(title) && /Unpaid/.test(orderText), `the order reads: ${orderText}`);
        const session = await page.evaluate(() => JSON.parse(localStorage.getItem("seckill.session")));
        const mine = await http(inst.url, "GET", "/api/orders?limit=100", { token: session.token });
        assertEqual(mine.status, 200, "GET /api/orders");
        const forSale = mine.json.items.filter((o) => o.voucherId === qv);
        assertEqual(forSale.length, 1, "the buyer's orders for the queue sale");
        assertEqual(forSale[0].id, bought[1], "the order's id");
        const stats = await http(inst.url, "GET", `/api/vouchers/${qv}/stats`, { token: token(1, true) });
        assertEqual(stats.json.sold, 1, "units of the queue sale sold");
        assertEqual(stats.json.queue.length, ahead + 1, "the room's length");

        // Reads of the place: never two within a second, none once bought.
        await page.waitForTimeout(2500);
        const reads = since().filter((r) => r.method === "GET" && r.path.endsWith("/queue"));
        for (let i = 1; i < reads.length; i++)
            assert(reads[i].t - reads[i - 1].t >= 950, `two reads of the place ${reads[i].t - reads[i - 1].t} ms apart`);
        assert(!reads.some((r) => r.t > boughtAt), "the page read the place after buying");

        // The live region: polite, the place said (never twice within a
        // few seconds), the admission once.
        const live = card(page, qv).locator("[aria-live]");
        assertEqual(await live.getAttribute("aria-live"), "polite", "the live region's politeness");
        const said = (await page.evaluate(() => window.said)).filter((x) => x.id === qv);
        const turns = said.filter((x) => /^Your turn has come/.test(x.text));
        assertEqual(turns.length, 1, `admissions said (${JSON.stringify(said)})`);
        assert(said.some((x) => x.text === `Place 11 of the queue for ${title}: less than a minute to wait.`), `the place never said: ${JSON.stringify(said)}`);
        const calm = said.filter((x) => !turns.includes(x));
        for (let i = 1; i < calm.length; i++)
            assert(calm[i].t - calm[i - 1].t >= 4500, `said twice within ${calm[i].t - calm[i - 1].t} ms: ${JSON.stringify(said)}`);

        // Log out: the token ends on the server, the tab forgets it and
        // its places.
        const logout = page.waitForRequest((r) => r.method() === "POST" && new URL(r.url()).pathname === "/api/auth/logout");
        await page.click("#logout");
        assertEqual((await logout).headers().authorization, `Bearer ${session.token}`, "the logout's token");
        await waitFor(() => page.isVisible("#login"), "the login form after logging out");
        assert(/^Logged out\.$/.test(await page.textContent("#login-msg")), `after logging out: ${await page.textContent("#login-msg")}`);
        assertEqual(await focused(page), "phone", "focus after logging out");
        assertEqual(await page.evaluate(() => localStorage.getItem("seckill.session")), null, "the session kept");
        const marks = await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith("seckill.queue.")));
        assertEqual(marks.length, 0, "queue notes kept after logging out");
        const refused = await http(inst.url, "GET", "/api/orders", { token: session.token });
        assertEqual(refused.status, 401, "GET /api/orders with the logged-out token");
        assertEqual(await card(page, qv).locator("button").textContent(), "Log in to join the queue", "the queue sale's button logged out");
        assertNoProblems(page);
    } finally {
        await context.close();
        await stop(inst.child);
    }
}

// Queue sales on an instance whose tickets are good 3 s. A buyer who
// joins a sale that began 10 s ago, behind nobody, is admitted as it
// joins (not at its place's turn by the rate, long gone with its ticket),
// and the page buys for it. A buyer whose turn came and went unused (it
// joined before the begin through the API and came to the page too late)
// is told once, in the card's message, that the turn has passed; the
// place line does not say it again. MySQL has the one order.
async function buyerQueueLate() {
    const rate = 2;
    const ttl = 3;
    const inst = await startSeckilld("browser-seckilld-queue-late", {
        ...MAIN_ENV,
        SECKILL_WAITROOM_ADMIT_RATE: String(rate),
        SECKILL_WAITROOM_TICKET_TTL_S: String(ttl),
        SECKILL_WAITROOM_OPEN_S: "300",
    });
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    const shop = 9200000 + (RUN % 100000);
    const phone = "138" + String(RUN % 100000000).padStart(8, "0");
    const passed = "Your turn has passed: the queue's ticket is good only for a short while after your turn comes.";
    // How many times the card of id shows text (hidden elements' text
    // is not shown).
    const shown = (id, text) => card(page, id).evaluate((n, t) => n.innerText.split(t).length - 1, text);
    try {
        const lateTitle = "Queue begun: 40 off";
        const late = await createVoucher(inst.url, {
            shopId: shop,
            title: lateTitle,
            type: "seckill",
            stock: 3,
            beginTime: timeIn(-10),
            endTime: timeIn(3600),
            admission: "queue",
        });
        const begin = Math.ceil(Date.now() / 1000 + 3) * 1000;
        const gone = await createVoucher(inst.url, {
            shopId: shop,
            title: "Queue missed: 10 off",
            type: "seckill",
            stock: 3,
            beginTime: iso(begin),
            endTime: timeIn(3600),
            admission: "queue",
        });
        await page.goto(`${inst.url}/?shop=${shop}`);
        await waitFor(() => card(page, late).isVisible(), "the vouchers");
        await logIn(page, phone, inst.url);
        const session = await page.evaluate(() => JSON.parse(localStorage.getItem("seckill.session")));
        // The same buyer joins the other sale before its begin, through
        // the API: the page has no note of it.
        const joined = await joinByApi(inst.url, gone, session.token);
        assertEqual(joined.status, 202, "the join through the API");
        assert(Date.now() < begin, "joined after the begin: the machine is too slow for this test");

        // The late joiner: place 1, its turn by the rate 9.5 s ago.
        await page.getByRole("button", { name: `Join the queue ${lateTitle}` }).click();
        const msg = card(page, late).locator(".msg");
        const said = await waitFor(async () => {
            const t = await msg.textContent();
            return /^Bought for you when your turn came: order \d+\.$|^Your turn has passed/.test(t) ? t : null;
        }, "the late joiner's purchase");
        assert(said.startsWith("Bought for you"), `the late joiner's card says: ${said}`);
        assertEqual(await shown(late, "Your turn has passed"), 0, "turn passed on the late joiner's card");
        const orders = mysql(`SELECT user_id FROM voucher_orders WHERE voucher_id = ${late}`).trim().split("\n");
        assertEqual(orders.length, 1, "the late sale's orders in MySQL");
        assertEqual(orders[0], String(session.userId), "the late sale's buyer");

        // The other sale: place 1 was admitted 0.5 s after the begin and
        // its ticket ran out 3 s later; the page joins after that.
        const after = begin + Math.ceil(1000 / rate) + ttl * 1000 + 1000;
        await page.waitForTimeout(Math.max(0, after - Date.now()));
        await page.click("#shop-form button");
        const join = page.getByRole("button", { name: "Join the queue Queue missed: 10 off" });
        await waitFor(() => join.isEnabled(), "the join button of the missed sale");
        await join.click();
        const goneMsg = card(page, gone).locator(".msg");
        await waitFor(async () => (await goneMsg.textContent()) === passed, "the turn passed");
        await waitFor(async () => (await card(page, gone).locator("button").textContent()) === "Turn passed", "the button once passed");
        assert(await card(page, gone).locator("button").isDisabled(), "the button is enabled once the turn passed");
        // Shown once, and still once a few redraws later.
        await page.waitForTimeout(1500);
        assertEqual(await shown(gone, "Your turn has passed"), 1, "turn passed on the card");
        assertEqual(mysql(`SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = ${gone}`).trim(), "0", "the missed sale's orders in MySQL");
        assertNoProblems(page);
    } finally {
        await context.close();
        await stop(inst.child);
    }
}

// Every error code of the document has its own words.
async function errorWords() {
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(`${server.url}/`);
    const doc = await (await fetch(`${server.url}/openapi.json`)).json();
    const codes = doc.components.schemas.ErrorCode.enum;
    const words = await page.evaluate(async (list) => {
        const { describeError } = await import("/static/api.js");
        return list.map((code) => describeError({ status: 400, error: { code, message: "detail" }, retryAfter: 7 }).text);
    }, codes);
    codes.forEach((code, i) => {
        assert(!/^Error \d+/.test(words[i]), `${code} has no words of its own: ${words[i]}`);
    });
    assertEqual(new Set(words).size, codes.length, "distinct words per code");
    assert(/Wait 7 s/.test(words[codes.indexOf("RATE_LIMITED")]), "rate limited says how long to wait");
    // A load balancer's 502 or 504 (an instance that died mid-purchase,
    // its body haproxy's HTML): the outcome is unknown, as with a 503 that
    // says so.
    const lb = await page.evaluate(async () => {
        const { describeError } = await import("/static/api.js");
        return [502, 504].map((status) =>
            describeError({ status, error: { code: `HTTP_${status}`, message: "<html>" }, retryAfter: 0 }),
        );
    });
    for (const d of lb) {
        assert(/could not confirm the outcome/.test(d.text), `a load balancer's error: ${d.text}`);
        assert(d.checkOrders === true, "a load balancer's error sends the buyer to My orders");
    }
    assertNoProblems(page);
    await context.close();
}

// ---- the proof of work ----

// The worker's code: its SHA-256 against known answers (the empty
// string, "abc", and the two-block message of FIPS 180-2's examples),
// and a real challenge solved through solvePow, with progress every 2000
// numbers.
async function powWorker() {
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(`${server.url}/`);
    const vectors = [
        ["", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
        ["abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
        [
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        ],
    ];
    const got = await page.evaluate(async (texts) => {
        const { sha256Hex } = await import("/static/pow-worker.js");
        return texts.map(sha256Hex);
    }, vectors.map((v) => v[0]));
    vectors.forEach(([text, want], i) => assertEqual(got[i], want, `SHA-256 of "${text}"`));

    const run = await page.evaluate(async () => {
        const { solvePow } = await import("/static/api.js");
        const challenge = await (await fetch("/api/pow", { cache: "no-store" })).json();
        const progress = [];
        const header = await solvePow(challenge, (f) => progress.push(f));
        return { challenge, header, progress };
    });
    assertEqual(run.challenge.maxnumber, POW_MAXNUMBER, "the challenge's maxnumber");
    const s = powSolution(run.header);
    assert(powSolves(s) && s.challenge === run.challenge.challenge, `a wrong solution: ${JSON.stringify(s)}`);
    for (const k of ["algorithm", "salt", "signature"]) assertEqual(s[k], run.challenge[k], `the solution's ${k}`);
    // 0 at the start, then one for each 2000 numbers tried before the
    // answer.
    assertEqual(run.progress.length, 1 + Math.floor(s.number / 2000), `progress reports for number ${s.number}`);
    assert(
        run.progress.every((f, i) => f >= 0 && f <= 1 && (i === 0 ? f === 0 : f > run.progress[i - 1])),
        `progress goes from 0 up: ${run.progress.join(",")}`,
    );
    assertNoProblems(page);
    await context.close();
}

// On a 360 px phone: while the page works, the send button is disabled
// and a labelled bar shows; a solution the service refuses (here one
// made wrong on its way) brings a fresh challenge, which the page solves
// and sends once more.
async function powRetry() {
    const context = await browser.newContext({ viewport: NARROW });
    const page = await newPage(context);
    const phone = "136" + String(RUN % 100000000).padStart(8, "0");
    await page.goto(`${server.url}/`);
    await waitFor(() => page.isVisible("#login"), "the login form");

    // Hold the worker's script: the page stays in the middle of its work.
    let release;
    const held = new Promise((r) => (release = r));
    await page.route("**/static/pow-worker.js", async (route) => {
        await held;
        await route.continue();
    });
    // The first solution goes out with its number changed.
    const sent = [];
    await page.route("**/api/auth/code", async (route) => {
        let header = route.request().headers()["seckill-pow"];
        if (!sent.length && header) {
            const wrong = powSolution(header);
            wrong.number = (wrong.number + 1) % (POW_MAXNUMBER + 1);
            header = Buffer.from(JSON.stringify(wrong)).toString("base64");
        }
        sent.push(header);
        await route.continue({ headers: { ...route.request().headers(), "seckill-pow": header } });
    });

    await page.fill("#phone", phone);
    await page.click("#send-code");
    await waitFor(() => page.isVisible("#pow"), "the proof of work's bar");
    assert(await page.isDisabled("#send-code"), "the send button is enabled while the page works");
    const bar = page.getByRole("progressbar", { name: /Checking this browser/ });
    assert(await bar.isVisible(), "no progress bar named for the check");
    assert(/Checking this browser/.test(await page.textContent("#login-msg")), "the status line says what happens");
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert(width <= NARROW.width, `the page is ${width} px wide on a ${NARROW.width} px phone`);
    const box = await bar.boundingBox();
    assert(box && box.x >= 0 && box.x + box.width <= NARROW.width, `the bar lies outside the screen: ${JSON.stringify(box)}`);
    await page.screenshot({ path: path.join(SHOTS, "buyer-pow-narrow.png"), fullPage: true });
    release();

    await waitFor(() => page.isVisible("#dev-code"), "the development code after the second solution");
    assertEqual(sent.length, 2, "code requests");
    const [first, second] = sent.map(powSolution);
    assert(first.challenge !== second.challenge, "the second solution answers the same challenge");
    assert(powSolves(second), "the second solution does not solve its challenge");
    assertEqual(redis("EXISTS", `pow:spent:${first.challenge}`).trim(), "0", "the refused solution spent");
    assertEqual(redis("EXISTS", `pow:spent:${second.challenge}`).trim(), "1", "the accepted solution spent");
    await page.unroute("**/api/auth/code");
    await page.unroute("**/static/pow-worker.js");
    await page.click("#login-button");
    await waitFor(() => page.isVisible("#who"), "the logged-in header");
    assertNoProblems(page);
    await context.close();
}

// An instance that asks for no proof of work (maxnumber 0): the page
// does none and sends no header.
async function powOff() {
    const off = await startSeckilld("browser-seckilld-no-pow", { SECKILL_DEV: "1", SECKILL_POW_MAXNUMBER: "0" });
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    const workers = [];
    page.on("request", (r) => {
        if (/\/pow-worker\.js$/.test(new URL(r.url()).pathname)) workers.push(r.url());
    });
    try {
        await page.goto(`${off.url}/`);
        await waitFor(() => page.isVisible("#login"), "the login form");
        await page.fill("#phone", "135" + String(RUN % 100000000).padStart(8, "0"));
        const request = page.waitForRequest(isCodeRequest);
        await page.click("#send-code");
        const header = (await request).headers()["seckill-pow"];
        await waitFor(() => page.isVisible("#dev-code"), "the development code");
        assertEqual(header, undefined, "Seckill-PoW without a proof of work asked");
        assertEqual(workers.length, 0, "worker scripts loaded");
        assertNoProblems(page);
    } finally {
        await context.close();
        await stop(off.child);
    }
}

// How long a phone-class CPU works: 9 challenges searched in the page
// with the CPU slowed down 4 times. Chromium's emulation slows only a
// page's main thread (a worker target refuses it), so the test runs the
// worker's own search there, as the worker would. The time is printed,
// not judged; every answer must solve its challenge.
async function powTiming() {
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(`${server.url}/`);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Emulation.setCPUThrottlingRate", { rate: 4 });
    const runs = await page.evaluate(async (n) => {
        const { powSearch } = await import("/static/pow-worker.js");
        const out = [];
        for (let i = 0; i < n; i++) {
            const challenge = await (await fetch("/api/pow", { cache: "no-store" })).json();
            const t0 = performance.now();
            const number = powSearch(challenge.salt, challenge.challenge, challenge.maxnumber);
            out.push({ ms: performance.now() - t0, number, challenge });
        }
        return out;
    }, 9);
    await cdp.send("Emulation.setCPUThrottlingRate", { rate: 1 });
    for (const { number, challenge } of runs) {
        assertEqual(challenge.maxnumber, POW_MAXNUMBER, "the challenge's maxnumber");
        assert(powSolves({ ...challenge, number }), `${number} does not solve ${JSON.stringify(challenge)}`);
    }
    const ms = runs.map((r) => r.ms).sort((a, b) => a - b);
    console.log(`pow-solve median_ms=${Math.round(ms[Math.floor(ms.length / 2)])} maxnumber=${POW_MAXNUMBER}`);
    assertNoProblems(page);
    await context.close();
}

// ---- the admin ----

// The form's fields, valid, and the same as an API body.
const VALID = {
    shopId: "1",
    title: "Valid title",
    subTitle: "",
    rules: "",
    payValue: "4750",
    actualValue: "5000",
    type: "seckill",
    stock: "10",
};

async function fillForm(page, fields, beginOffsetS = 60, endOffsetS = 3660) {
    for (const [k, v] of Object.entries(fields)) {
        if (k === "type" || k === "admission") await page.selectOption(`#f-${k}`, v);
        else await page.fill(`#f-${k}`, v);
    }
    // The reader's local time, as the datetime-local inputs take it.
    const local = (offsetS) =>
        page.evaluate((o) => {
            const d = new Date(Math.floor(Date.now() / 1000 + o) * 1000);
            const two = (n) => String(n).padStart(2, "0");
            // Chromium writes whole minutes without the seconds.
            const sec = d.getSeconds() ? `:${two(d.getSeconds())}` : "";
            return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(d.getMinutes())}${sec}`;
        }, offsetS);
    await page.fill("#f-beginTime", beginOffsetS === null ? "" : await local(beginOffsetS));
    await page.fill("#f-endTime", await local(endOffsetS));
}

async function adminValidation(page, adminToken) {
    // Each case: what the form gets, and the same mistake in an API body.
    const base = {
        shopId: 1,
        title: "Valid title",
        payValue: 4750,
        actualValue: 5000,
        type: "seckill",
        stock: 10,
        beginTime: timeIn(60),
        endTime: timeIn(3660),
    };
    const cases = [
        ["shopId", { shopId: "abc" }, { shopId: "abc" }],
        ["shopId", { shopId: "0" }, { shopId: 0 }],
        ["title", { title: "" }, { title: undefined }],
        ["title", { title: "t".repeat(256) }, { title: "t".repeat(256) }],
        ["subTitle", { subTitle: "s".repeat(256) }, { subTitle: "s".repeat(256) }],
        ["rules", { rules: "r".repeat(1025) }, { rules: "r".repeat(1025) }],
        ["payValue", { payValue: "-1" }, { payValue: -1 }],
        ["payValue", { payValue: "0" }, { payValue: 0 }],
        ["payValue", { payValue: "5001" }, { payValue: 5001 }],
        ["actualValue", { actualValue: "100000000001" }, { actualValue: 100000000001 }],
        ["stock", { stock: "1.5" }, { stock: 1.5 }],
        ["stock", { stock: "" }, { stock: undefined }],
        ["beginTime", { begin: null }, { beginTime: undefined }],
        ["endTime", { end: "before" }, { endTime: timeIn(30) }],
    ];
    for (const [field, form, api] of cases) {
        const fields = { ...VALID };
        for (const [k, v] of Object.entries(form)) if (k !== "begin" && k !== "end") fields[k] = v;
        await fillForm(page, fields, form.begin === null ? null : 60, form.end === "before" ? 30 : 3660);
        await page.click("#create-button");
        const shown = await page.textContent(`.field-error[data-for="${field}"]`);
        const r = await http(server.url, "POST", "/api/vouchers", { body: { ...base, ...api }, token: adminToken });
        assertEqual(r.status, 400, `the API on a bad ${field}`);
        assertEqual(shown, r.json.error.message, `the page's message for ${field} (${JSON.stringify(form).slice(0, 60)})`);
    }
}

// The admin's session the page keeps in the tab ({token, username, ...}),
// or null.
function storedSession(page) {
    return page.evaluate((key) => JSON.parse(sessionStorage.getItem(key) || "null"), ADMIN_SESSION_KEY);
}

function focused(page) {
    return page.evaluate(() => document.activeElement && document.activeElement.id);
}

// Log in through the admin page's form, as a person would: type the name
// and the password, press Log in.
async function adminLogIn(page, username, password) {
    for (const [id, text] of [
        ["#username", username],
        ["#password", password],
    ]) {
        await page.fill(id, "");
        await page.locator(id).pressSequentially(text);
    }
    await page.getByRole("button", { name: "Log in" }).click();
}

// The refunds and the audit log: a payment for a cancelled order is a
// refund to give back; the admin marks it refunded (after confirming),
// and the audit log shows that, with the voucher the admin made.
async function adminRecords() {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    await page.goto(`${server.url}/admin`);
    const username = `records-admin-${RUN}`;
    const password = `the records' password ${RUN}`;
    adminAdd(username, password);
    await adminLogIn(page, username, password);
    await waitFor(() => page.isVisible("#session"), "the session shown");
    const adminTok = (await storedSession(page)).token;

    // A voucher made by this admin, bought, cancelled, then paid: refused
    // as closed, a refund.
    const v = await http(server.url, "POST", "/api/vouchers", {
        token: adminTok,
        body: { shopId: 830000 + (RUN % 100000), title: "Refund test", payValue: 4750, actualValue: 5000, type: "seckill", stock: 3, beginTime: timeIn(-60), endTime: timeIn(3600) },
    });
    assertEqual(v.status, 201, `the voucher (${v.text})`);
    const buyer = token(9600000000 + RUN);
    const bought = await http(server.url, "POST", `/api/vouchers/${v.json.id}/seckill`, { token: buyer });
    assertEqual(bought.status, 201, `the purchase (${bought.text})`);
    const order = bought.json.orderId;
    assertEqual((await http(server.url, "POST", `/api/orders/${order}/cancel`, { token: buyer })).status, 200, "the cancel");
    const paid = await http(server.url, "POST", `/api/orders/${order}/pay`, { token: buyer });
    assertEqual(paid.status, 409, `the payment of a cancelled order (${paid.text})`);

    await page.click("#records-refresh");
    const refundRow = page.locator("#refund-rows tr").filter({ hasText: order });
    await waitFor(() => refundRow.count(), "the refund listed");
    assert(/paid for a closed order/.test(await refundRow.textContent()), `the refund's row: ${await refundRow.textContent()}`);
    // Dismissed: nothing recorded.
    page.once("dialog", (d) => d.dismiss());
    await refundRow.getByRole("button", { name: /Mark refund/ }).click();
    await page.waitForTimeout(300);
    let listed = await http(server.url, "GET", "/api/refunds?status=pending&limit=100", { token: adminTok });
    assert(listed.json.items.some((r) => r.orderId === order), "the refund still pending after a dismissed confirmation");
    // Confirmed: done, gone from the pending list.
    page.once("dialog", (d) => d.accept());
    await refundRow.getByRole("button", { name: /Mark refund/ }).click();
    await waitFor(async () => (await refundRow.count()) === 0, "the refund gone from the pending list");
    await waitFor(async () => /recorded as done/.test(await page.textContent("#refund-msg")), "the message that the refund is done");
    listed = await http(server.url, "GET", "/api/refunds?status=done&limit=100", { token: adminTok });
    assert(listed.json.items.some((r) => r.orderId === order && r.status === "done"), "the refund done in the API");

    // The audit log: the refund done on top, the voucher made by this
    // admin, both from this page's address.
    const top = page.locator("#audit-rows tr").first();
    await waitFor(async () => /refund\.done/.test(await top.textContent()), "the refund's record on top of the audit log");
    assert((await top.textContent()).includes(username), `the record's admin: ${await top.textContent()}`);
    const made = page.locator("#audit-rows tr").filter({ hasText: `voucher ${v.json.id}` });
    await waitFor(() => made.count(), "the voucher's record");
    assert(/voucher\.create/.test(await made.textContent()) && /title: Refund test/.test(await made.textContent()), `the voucher's record: ${await made.textContent()}`);
    await shoot(page, "admin-records");
    assertNoProblems(page);
    await context.close();
}

// A wrong password: the API's own message, the password field emptied
// for another try, and nothing kept in the tab; after five, when to try
// again. On the narrowest common phone, where the form must fit without
// scrolling sideways.
async function adminWrongPassword() {
    // Each failure counts against the client's address for 15 minutes,
    // in Redis, across runs: this run's requests name an address of
    // their own in X-Forwarded-For (the service trusts the loopback
    // proxy), so that runs in a row never reach the address's limit.
    const addr = `2001:db8:${(RUN >>> 16).toString(16)}:${(RUN & 0xffff).toString(16)}::1`;
    const context = await browser.newContext({ viewport: NARROW, extraHTTPHeaders: { "X-Forwarded-For": addr } });
    const page = await newPage(context);
    const username = `page-wrong-${RUN}`;
    const wrong = "not the password of this account";
    adminAdd(username, "the password of this account");
    await page.goto(`${server.url}/admin`);

    const fits = await page.evaluate(() => {
        const box = document.getElementById("login-button").getBoundingClientRect();
        const field = document.getElementById("password").getBoundingClientRect();
        return { page: document.documentElement.scrollWidth, button: box.right, field: field.right };
    });
    assert(
        fits.page <= NARROW.width && fits.button <= NARROW.width && fits.field <= NARROW.width,
        `the login form at ${NARROW.width} px: ${JSON.stringify(fits)}`,
    );

    await adminLogIn(page, username, wrong);
    const shown = await waitFor(async () => {
        const t = await page.textContent("#login-msg");
        return t && t !== "Logging in…" ? t : null;
    }, "the refusal");
    const api = await http(server.url, "POST", "/api/admin/login", {
        body: { username, password: wrong },
        headers: { "X-Forwarded-For": addr },
    });
    assertEqual(api.status, 401, "the API on a wrong password");
    const words = api.json.error.message;
    assertEqual(shown, words[0].toUpperCase() + words.slice(1) + ".", "the page's message for a wrong password");
    assertEqual(await page.evaluate(() => sessionStorage.length), 0, "entries in session storage");
    assert(await page.isVisible("#login-form"), "the form stays");
    assert(await page.isHidden("#session"), "no session is shown");
    assertEqual(await page.inputValue("#password"), "", "the password field after a wrong one");
    assertEqual(await page.inputValue("#username"), username, "the name stays");
    assertEqual(await focused(page), "password", "focus after a wrong password");

    await shoot(page, "admin-login");

    // Five failures for the name lock it for 15 minutes: the page says
    // when to try again, from Retry-After.
    for (let i = 0; i < 3; i++) {
        const r = await http(server.url, "POST", "/api/admin/login", {
            body: { username, password: wrong },
            headers: { "X-Forwarded-For": addr },
        });
        assertEqual(r.status, 401, `wrong password ${i + 3}`);
    }
    await adminLogIn(page, username, wrong);
    const locked = await waitFor(async () => {
        const t = await page.textContent("#login-msg");
        return /^Too many attempts/.test(t) ? t : null;
    }, "the lock-out");
    assert(/you can try again in 1[0-5] min, at \d{1,2}:\d{2}/.test(locked), `the lock-out message: ${locked}`);
    assertEqual(await page.evaluate(() => sessionStorage.length), 0, "entries in session storage when locked out");
    assertNoProblems(page);
    await context.close();
}

async function adminFlow() {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    const resp = await page.goto(`${server.url}/admin`);
    assertEqual(resp.status(), 200, "GET /admin");
    const username = `page-admin-${RUN}`;
    const password = `the page's password ${RUN}`;
    adminAdd(username, password);

    // Logged out: the form, and the counters ask for a login.
    assert(await page.isVisible("#login-form"), "the login form");
    assert(await page.isHidden("#session"), "no session before logging in");
    await waitFor(async () => /Log in to see the counters/.test(await page.textContent("#metrics-msg")), "the counters' hint");

    await adminLogIn(page, username, password);
    await waitFor(() => page.isVisible("#session"), "the session shown");
    assertEqual(await page.textContent("#who-name"), username, "the name shown");
    assert(await page.isHidden("#login-form"), "the form is hidden once logged in");
    assertEqual(await page.inputValue("#password"), "", "the password field once logged in");
    assertEqual(await focused(page), "who", "focus after logging in");
    const session = await storedSession(page);
    assert(session && /^[A-Za-z0-9_-]{83}$/.test(session.token), `the session kept in the tab: ${JSON.stringify(session)}`);
    const adminToken = session.token;

    await adminValidation(page, adminToken);

    // Create a sale that starts now with a stock of 40.
    const shop = 810000 + (RUN % 100000);
    await fillForm(page, { ...VALID, shopId: String(shop), title: "Crowd test: 40 vouchers", stock: "40" });
    await page.click('button[data-start="0"]');
    await page.click("#create-button");
    const created = await waitFor(async () => /Created voucher (\d+)/.exec(await page.textContent("#create-msg")), "the voucher created");
    const id = created[1];
    const row = page.locator(`#voucher-rows tr[data-voucher-id="${id}"]`);
    const stock = row.locator("td.stock");
    await waitFor(async () => (await stock.textContent()) === "40", "the new voucher with 40 in stock");
    // "now" opened the sale at once.
    assertEqual(await row.locator("td.status").textContent(), "on sale", "the new sale's status");

    // A crowd in another process buys 30 of them, two at a time, each
    // buyer after a pause of 300 ms: at least 4.5 s of selling, whatever
    // the machine's speed, so the page's readings (one a second) fall
    // inside it.
    const crowd = start("browser-crowd", process.execPath, [
        path.join(ROOT, "tests/web/crowd.mjs"),
        server.url,
        id,
        String(9400000000 + RUN * 100),
        "30",
        "2",
        "300",
    ]);
    // The page reads the stock once a second: it must see it fall.
    const readings = new Set();
    await waitFor(async () => {
        readings.add(await stock.textContent());
        return readings.has("10");
    }, "the stock to fall to 10");
    const code = await crowd.exited;
    assertEqual(code, 0, `the crowd (${crowd.output.trim()})`);
    assert(/crowd: 30 bought/.test(crowd.output), `the crowd: ${crowd.output}`);
    const between = [...readings].map(Number).filter((n) => n < 40 && n > 10);
    assert(between.length >= 1, `the page saw the stock only at ${[...readings].join(", ")}`);

    // The chart: a stock line and bars of units sold.
    await waitFor(() => page.locator("#chart path.stock").count(), "the stock line");
    await waitFor(() => page.locator("#chart rect.sales").count(), "the sales bars");
    // The voucher's stats (the admin token reads them): 30 sold.
    await waitFor(async () => (await row.locator("td.sold").textContent()) === "30", "30 sold in the stats");
    assertEqual(await row.locator("td.returned").textContent(), "0", "returned units");
    // The counters of /metrics: at least the crowd's 30 orders.
    await waitFor(async () => Number(await page.textContent('[data-counter="ok"] .n')) >= 30, "30 orders in the counters");

    // A queue sale through the form's admission choice: its row shows
    // the waiting room's numbers once buyers join; an open sale's a dash.
    await fillForm(page, { ...VALID, shopId: String(shop), title: "Queue test: 5 vouchers", stock: "5", admission: "queue" });
    await page.click('button[data-start="0"]');
    await page.click("#create-button");
    const qid = (
        await waitFor(async () => {
            const m = /Created voucher (\d+)/.exec(await page.textContent("#create-msg"));
            return m && m[1] !== id ? m : null;
        }, "the queue sale created")
    )[1];
    assertEqual((await http(server.url, "GET", `/api/vouchers/${qid}`)).json.admission, "queue", "the admission the form sent");
    const queueCell = page.locator(`#voucher-rows tr[data-voucher-id="${qid}"] td.queue`);
    await waitFor(async () => (await queueCell.textContent()) === "0 joined · 0 admitted", "the empty waiting room");
    for (let i = 0; i < 3; i++) {
        const r = await joinByApi(server.url, qid, token(9500000000 + RUN * 10 + i));
        assertEqual(r.status, 202, `a buyer's join (${r.text})`);
    }
    await waitFor(async () => (await queueCell.textContent()) === "3 joined · 3 admitted", "the waiting room's numbers");
    assertEqual(await row.locator("td.queue").textContent(), "–", "an open sale's queue");
    // The chart follows the newest voucher: back to the crowd's sale.
    await row.click();

    await shoot(page, "admin");

    // Log out: the form is back, the tab keeps nothing, and the server
    // refuses the token from then on.
    await page.getByRole("button", { name: "Log out" }).click();
    await waitFor(() => page.isVisible("#login-form"), "the form after logging out");
    assert(await page.isHidden("#session"), "no session after logging out");
    assert(/Logged out\./.test(await page.textContent("#login-msg")), `after logging out: ${await page.textContent("#login-msg")}`);
    assertEqual(await storedSession(page), null, "the session kept after logging out");
    assertEqual(await focused(page), "username", "focus after logging out");
    const refused = await http(server.url, "GET", "/api/admin/metrics", { token: adminToken });
    assertEqual(refused.status, 401, "GET /api/admin/metrics with the token logged out");
    await waitFor(async () => /Log in to see the counters/.test(await page.textContent("#metrics-msg")), "the counters' hint again");
    assertEqual(await page.locator("#counters .counter").count(), 0, "counters shown after logging out");

    // A session ended elsewhere (every token of the account logged out):
    // the page's next call answers 401 and the form comes back with why.
    await adminLogIn(page, username, password);
    await waitFor(() => page.isVisible("#session"), "the session shown again");
    const again = (await storedSession(page)).token;
    assert(again !== adminToken, "a new login has a new token");
    const all = await http(server.url, "POST", "/api/auth/logout", { token: again, body: { all: true } });
    assertEqual(all.status, 204, "logging out every token of the account");
    await waitFor(() => page.isVisible("#login-form"), "the form after the session ended elsewhere");
    assert(/log in again/i.test(await page.textContent("#login-msg")), `the message: ${await page.textContent("#login-msg")}`);
    assertEqual(await storedSession(page), null, "the session kept after a 401");

    assertNoProblems(page);
    await context.close();
}

// The controls of the selected sale: pause, resume and restock by their
// buttons, each checked through the API and in MySQL.
async function adminControls() {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    const username = `controls-admin-${RUN}`;
    const password = `the controls' password ${RUN}`;
    adminAdd(username, password);
    await page.goto(`${server.url}/admin`);
    await adminLogIn(page, username, password);
    await waitFor(() => page.isVisible("#session"), "the session shown");

    // A shop of its own: the other tests' are below 1,000,000.
    const shop = 9100000 + (RUN % 100000);
    const id = await createVoucher(server.url, {
        shopId: shop,
        title: "Controls test",
        type: "seckill",
        stock: 3,
        beginTime: timeIn(-5),
        endTime: timeIn(3600),
    });
    await page.fill("#shop-id", String(shop));
    await page.click('#shop-form button[type="submit"]');
    const row = page.locator(`#voucher-rows tr[data-voucher-id="${id}"]`);
    await waitFor(() => row.count(), "the voucher listed");
    await row.click();
    await waitFor(() => page.isVisible("#controls"), "the controls shown");
    assert(/Control voucher/.test(await page.textContent("#controls-title")), "the controls' title");
    // Before the start only: delete; the sale is on.
    assert(await page.isHidden("#ctl-delete"), "no delete once the sale began");

    const voucher = async () => (await http(server.url, "GET", `/api/vouchers/${id}`)).json;
    await page.click("#ctl-pause");
    await waitFor(async () => /Paused: done/.test(await page.textContent("#ctl-msg")), "the pause done");
    assertEqual((await voucher()).paused, true, "the voucher paused (API)");
    assertEqual(sql(`SELECT halt FROM seckill_vouchers WHERE voucher_id = ${id}`), "1", "halt in MySQL");
    // A list read that left before the pause may land after it: the row
    // says "paused" once the page's copy is the control's answer again.
    await waitFor(async () => (await row.locator("td.status").textContent()) === "paused", "the row's status");
    await waitFor(async () => (await page.textContent("#ctl-pause")) === "Resume", "the button now resumes");
    const buy = await http(server.url, "POST", `/api/vouchers/${id}/seckill`, { token: token(9600000000 + RUN) });
    assertEqual(buy.status, 409, "a purchase while paused");
    assertEqual(buy.json.error.code, "SALE_PAUSED", "its code");

    await page.click("#ctl-pause");
    await waitFor(async () => /Resumed: done/.test(await page.textContent("#ctl-msg")), "the resume done");
    assertEqual((await voucher()).paused, false, "the voucher resumed (API)");
    assertEqual(sql(`SELECT halt FROM seckill_vouchers WHERE voucher_id = ${id}`), "0", "halt in MySQL after the resume");
    await waitFor(async () => (await page.textContent("#ctl-pause")) === "Pause", "the button pauses again");

    await page.fill("#ctl-restock-n", "abc");
    await page.click("#ctl-restock");
    await waitFor(async () => /whole number/.test(await page.textContent("#ctl-msg")), "a bad number refused on the page");
    await page.fill("#ctl-restock-n", "5");
    await page.click("#ctl-restock");
    await waitFor(async () => /Restocked 5: done/.test(await page.textContent("#ctl-msg")), "the restock done");
    assertEqual((await voucher()).stock, 8, "the stock after the restock (API)");
    assertEqual(sql(`SELECT initial_stock FROM seckill_vouchers WHERE voucher_id = ${id}`), "8", "the initial stock in MySQL");
    await waitFor(async () => (await row.locator("td.stock").textContent()) === "8", "the row's stock");

    await shoot(page, "admin-controls");
    assertNoProblems(page);
    await context.close();
}

// Development mode (the login code on the page, Pay (dev)); 15 minutes
// to pay, as the buyer's test reads it; a proof of work before a code,
// of the default size (.run/env.test turns it off). The loopback proxy is
// trusted so that the admin's wrong-password test can name a client
// address of its own.
const MAIN_ENV = {
    SECKILL_DEV: "1",
    SECKILL_PAY_TIMEOUT_S: "900",
    SECKILL_POW_MAXNUMBER: String(POW_MAXNUMBER),
    SECKILL_TRUSTED_PROXIES: "127.0.0.0/8",
};

// ---- the home page and the orders' export ----

// A new buyer opening the home page sees a live sale of any shop without
// choosing one (GET /api/sales), and the upcoming ones.
async function buyerHome() {
    const context = await browser.newContext({ viewport: PHONE });
    const page = await newPage(context);
    const shop = 820000 + (RUN % 100000);
    const live = await createVoucher(server.url, {
        shopId: shop,
        title: `Home page sale ${RUN}`,
        payValue: 500,
        actualValue: 1000,
        type: "seckill",
        stock: 3,
        // The page asks for the 50 live sales ending soonest and the 50
        // upcoming ones beginning soonest; tests/web/run.sh empties the
        // test database first (the suites before it left over 1,000 live
        // sales there), and these two end and begin sooner than the web
        // suite's other sales. 45 s is three times what the checks below
        // may wait.
        beginTime: timeIn(-30),
        endTime: timeIn(45),
    });
    const upcoming = await createVoucher(server.url, {
        shopId: shop + 1,
        title: `Later today ${RUN}`,
        payValue: 500,
        actualValue: 1000,
        type: "seckill",
        stock: 3,
        beginTime: timeIn(600),
        endTime: timeIn(1200),
    });
    const sales = [];
    page.on("request", (r) => {
        if (new URL(r.url()).pathname === "/api/sales") sales.push(r.url());
    });
    await page.goto(`${server.url}/`);
    // The listing's snapshot may be a second old: the page's own refresh
    // brings the new sale.
    await waitFor(() => card(page, live).isVisible(), "the live sale on the home page", 15000);
    await waitFor(() => card(page, upcoming).isVisible(), "the upcoming sale on the home page", 15000);
    assertEqual(await page.inputValue("#shop-id"), "", "no shop asked for");
    assert(!/shop=/.test(page.url()), `the address names no shop: ${page.url()}`);
    assert(sales.length >= 2 && sales.every((u) => !/shopId=/.test(u)), `the page's listing calls: ${sales.join(" ")}`);
    assertEqual(await card(page, live).locator("button.buy").textContent(), "Log in to buy", "the live sale's button, logged out");
    // The shop filter stays: the upcoming sale's shop alone.
    await page.fill("#shop-id", String(shop + 1));
    await page.click("#shop-form button");
    await waitFor(async () => !(await card(page, live).isVisible()), "the other shop's sale gone");
    // The list is read anew for the shop: its sale comes back with it.
    await waitFor(() => card(page, upcoming).isVisible(), "the chosen shop's sale");
    assertNoProblems(page);
    await context.close();
}

// Whether the box of locator lies within the first screen (the viewport
// as it is scrolled now) of a page of size.
async function onScreen(locator, size) {
    const box = await locator.boundingBox();
    return !!box && box.y >= 0 && box.y + box.height <= size.height && box.x >= 0 && box.x + box.width <= size.width;
}

// Changes to the text of the page's live regions (aria-live, role status,
// alert or log), recorded from the page's start in window.liveChanges.
function recordLiveRegions(page) {
    return page.addInitScript(() => {
        window.liveChanges = [];
        const live = '[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"]';
        new MutationObserver((changes) => {
            for (const m of changes) {
                const n = m.target.nodeType === Node.TEXT_NODE ? m.target.parentNode : m.target;
                const region = n && n.closest && n.closest(live);
                if (region) window.liveChanges.push({ t: Date.now(), id: region.id || region.className, text: region.textContent });
            }
        }).observe(document, { subtree: true, childList: true, characterData: true });
    });
}

// On a 390x844 phone, with a shop of 20 vouchers: logged out, the login
// form is on the first screen; after a purchase low on the page, the bar
// of the unpaid order is on the screen wherever the page is scrolled, and
// names the amount and the time to pay; it leads to the order. While the
// countdowns tick and nothing else happens, no live region changes.
async function buyerPhone() {
    const context = await browser.newContext({ viewport: PHONE });
    const page = await newPage(context);
    await recordLiveRegions(page);
    const shop = 840000 + (RUN % 100000);
    const ids = [];
    for (let i = 0; i < 20; i++)
        ids.push(
            await createVoucher(server.url, {
                shopId: shop,
                title: `Phone sale ${i + 1}: 2 off`,
                payValue: 990,
                actualValue: 1190,
                type: "seckill",
                stock: 5000000,
                beginTime: timeIn(i < 10 ? -60 : 1800),
                endTime: timeIn(3600),
            }),
        );
    await page.goto(`${server.url}/?shop=${shop}`);
    await waitFor(async () => (await page.locator("li.voucher").count()) === 20, "the 20 vouchers");
    assert(await onScreen(page.locator("#code-form"), PHONE), "the login form lies outside the first screen");
    assert(await onScreen(page.locator("#phone"), PHONE), "the phone field lies outside the first screen");
    // Grouped counts.
    assertEqual(await card(page, ids[0]).locator(".stock").textContent(), "5,000,000 left", "the stock");

    // The countdowns tick; the live regions stay quiet.
    await page.waitForTimeout(500);
    const quietFrom = Date.now();
    await page.waitForTimeout(3000);
    const spoken = (await page.evaluate(() => window.liveChanges)).filter((x) => x.t >= quietFrom);
    assertEqual(spoken.length, 0, `live region changes while only the countdowns ticked: ${JSON.stringify(spoken.slice(0, 5))}`);
    // Each buy button is named with its voucher.
    const names = await page.evaluate(() =>
        [...document.querySelectorAll("li.voucher button")].map((b) => {
            const ids = (b.getAttribute("aria-labelledby") || "").split(" ");
            return ids.map((id) => document.getElementById(id).textContent).join(" ");
        }),
    );
    names.forEach((n, i) => assert(/Phone sale \d+: 2 off$/.test(n), `button ${i} is named ${n}`));

    // A phone number the service refuses: the words under the field,
    // tied to it, and the field marked invalid.
    await page.fill("#phone", "12");
    await page.click("#send-code");
    await waitFor(async () => (await page.getAttribute("#phone", "aria-invalid")) === "true", "the phone field marked invalid");
    const why = await page.textContent("#phone-error");
    assert(/phone/i.test(why), `the phone's error: ${why}`);
    assertEqual(await page.getAttribute("#phone", "aria-describedby"), "phone-error", "the phone field's description");

    const phone = "132" + String(RUN % 100000000).padStart(8, "0");
    await logIn(page, phone);
    assertEqual(await page.getAttribute("#phone", "aria-invalid"), null, "the phone field after a good number");
    // The 10th voucher, on sale, far down the page.
    const target = ids[9];
    const buy = card(page, target).locator("button.buy");
    await waitFor(() => buy.isEnabled(), "the buy button");
    await buy.click();
    const bought = await waitFor(async () => /Bought! Order (\d+)\./.exec(await card(page, target).locator(".msg").textContent()), "the purchase");
    // The purchase's outcome is said (the recorder hears live regions).
    const said = await page.evaluate(() => window.liveChanges.map((x) => x.text));
    assert(said.some((t) => t.startsWith(`Bought! Order ${bought[1]}.`)), `the purchase not said: ${JSON.stringify(said.slice(-5))}`);
    const bar = page.locator("#unpaid-bar");
    await waitFor(() => bar.isVisible(), "the unpaid bar");
    const words = await bar.textContent();
    assert(/^1 unpaid order · pay \D*9\.90\D* within 1[45] min \d\d s\s*›$/.test(words), `the bar: ${words}`);
    assert(await onScreen(bar, PHONE), "the unpaid bar lies outside the screen where the buyer bought");
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.waitForTimeout(200);
    assert(await onScreen(bar, PHONE), "the unpaid bar lies outside the first screen");
    await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
    await page.waitForTimeout(200);
    assert(await onScreen(bar, PHONE), "the unpaid bar lies outside the screen at the page's end");
    await shoot(page, "buyer-phone-bought");
    await page.setViewportSize(PHONE);
    await page.evaluate(() => window.scrollTo(0, 0));
    await bar.click();
    await waitFor(async () => (await focused(page)) === `order-${bought[1]}`, "the order focused from the bar");
    assert(await onScreen(page.locator(`#order-${bought[1]}`), PHONE), "the order is on the screen after the bar's link");
    assertNoProblems(page);
    await context.close();
}

// A buyer with 52 orders: My orders shows the newest 50 and the 2 older
// ones after "Show older orders" (the API's cursor).
async function buyerOrderPages() {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await newPage(context);
    const shop = 850000 + (RUN % 100000);
    const userId = 9800000000 + RUN;
    const tok = token(userId);
    for (let i = 0; i < 52; i++) {
        const id = await createVoucher(server.url, {
            shopId: shop,
            title: `Paged ${i + 1}`,
            type: "seckill",
            stock: 2,
            beginTime: timeIn(-60),
            endTime: timeIn(3600),
        });
        const r = await http(server.url, "POST", `/api/vouchers/${id}/seckill`, { token: tok });
        assertEqual(r.status, 201, "a purchase for the pages");
    }
    await page.addInitScript(
        ([t, u]) =>
            localStorage.setItem("seckill.session", JSON.stringify({ token: t, phone: "+8613100000000", userId: u, expiresAt: Date.now() + 3600e3 })),
        [tok, String(userId)],
    );
    await page.goto(`${server.url}/?shop=${shop}`);
    const rows = page.locator("#order-list li");
    await waitFor(async () => (await rows.count()) === 50, "the first 50 orders");
    const more = page.getByRole("button", { name: "Show older orders" });
    assert(await more.isVisible(), "no button for older orders");
    await more.click();
    await waitFor(async () => (await rows.count()) === 52, "52 orders");
    assert(await more.isHidden(), "the button stays after the last page");
    assertEqual(await rows.last().locator(".title").textContent(), "Paged 1", "the oldest order, last");
    assertEqual(await page.locator("#unpaid-text").textContent().then((t) => /^52 unpaid orders/.test(t)), true, "the bar counts 52");
    assertNoProblems(page);
    await context.close();
}

// The admin selects a sale, sees its newest orders, and clicks Download
// CSV: the file's header and rows are MySQL's.
async function adminExport() {
    const context = await browser.newContext({ viewport: DESKTOP, acceptDownloads: true });
    const page = await newPage(context);
    const username = `export-admin-${RUN}`;
    const password = `the export's password ${RUN}`;
    adminAdd(username, password);
    const shop = 830000 + (RUN % 100000);
    const id = await createVoucher(server.url, {
        shopId: shop,
        title: "Export test",
        payValue: 4750,
        actualValue: 5000,
        type: "seckill",
        stock: 10,
        beginTime: timeIn(-30),
        endTime: timeIn(3600),
    });
    const buyers = tokens(9500000000 + RUN * 10, 4);
    for (const b of buyers) {
        const r = await http(server.url, "POST", `/api/vouchers/${id}/seckill`, { token: b.token });
        assertEqual(r.status, 201, "a purchase for the export");
    }
    await page.goto(`${server.url}/admin`);
    await adminLogIn(page, username, password);
    await waitFor(() => page.isVisible("#session"), "the session shown");
    await page.fill("#shop-id", String(shop));
    await page.click("#shop-form button");
    const row = page.locator(`#voucher-rows tr[data-voucher-id="${id}"]`);
    await waitFor(() => row.isVisible(), "the sale's row");
    // Selected from the keyboard: the row takes the focus, Enter selects.
    await row.focus();
    await page.keyboard.press("Enter");
    await waitFor(async () => (await row.getAttribute("aria-current")) === "true", "the row selected by Enter");
    await waitFor(async () => (await page.locator("#sale-orders-rows tr").count()) === 4, "the sale's 4 orders");
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#sale-orders-csv")]);
    assertEqual(download.suggestedFilename(), `voucher-${id}-orders.csv`, "the file's name");
    const file = await download.path();
    const lines = readFileSync(file, "utf8").split("\n");
    assertEqual(lines.pop(), "", "the file ends with a newline");
    assertEqual(lines[0], "orderId,userId,status,amount,createTime,payDeadline,payTime,closeTime", "the header line");
    const inMysql = mysql(`SELECT id FROM voucher_orders WHERE voucher_id = ${id} ORDER BY id`).trim().split("\n");
    assertEqual(lines.length - 1, inMysql.length, "rows in the file and in MySQL");
    assertEqual(lines.slice(1).map((l) => l.split(",")[0]).join(" "), inMysql.join(" "), "the file's order ids");
    assert(lines.slice(1).every((l) => /^\d+,\d+,unpaid,4750,\d{4}-\d\d-\d\dT[0-9:]{8}Z,[^,]+,,$/.test(l)), `the rows: ${lines[1]}`);
    await waitFor(async () => /Saved voucher-\d+-orders\.csv/.test(await page.textContent("#sale-orders-msg")), "the saved message");
    await shoot(page, "admin-orders");
    // On a phone the rows are cards, each cell named with its column,
    // and nothing scrolls sideways.
    await page.setViewportSize(PHONE);
    await page.waitForTimeout(300);
    assertEqual(await row.locator("td.stock").getAttribute("data-label"), "Stock", "the stock cell's label");
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    assert(wide <= PHONE.width, `the admin's page is ${wide} px wide on a ${PHONE.width} px phone`);
    const cells = await page.evaluate(() => {
        const t = document.getElementById("voucher-table");
        return { scroll: t.parentElement.scrollWidth, width: t.parentElement.clientWidth };
    });
    assert(cells.scroll <= cells.width, `the vouchers' cards scroll sideways: ${JSON.stringify(cells)}`);
    assertNoProblems(page);
    await context.close();
}

async function main() {
    mkdirSync(SHOTS, { recursive: true });
    try {
        server = await startSeckilld("browser-seckilld", MAIN_ENV);
        browser = await launchChromium();
        await test("browser: buyer logs in (a proof of work solved), waits for the sale on the server's clock, buys once, sees the order", buyerFlow);
        await test(
            "browser: buyer joins a queue sale and buys when admitted (a reload reads the place; Log out ends the token)",
            buyerQueue,
        );
        await test(
            "browser: a buyer who joins a queue sale long after its begin buys; a turn gone by is said once",
            buyerQueueLate,
        );
        await test("browser: a new buyer sees the live and upcoming sales of every shop without choosing one", buyerHome);
        await test(
            "browser: on a 390x844 phone the login form is on the first screen, the unpaid order's bar on every screen; countdowns stay out of live regions",
            buyerPhone,
        );
        await test("browser: My orders pages past 50 with the API's cursor", buyerOrderPages);
        await test("browser: every error code has its own words", errorWords);
        await test("browser: the proof-of-work worker hashes known answers right and solves a challenge", powWorker);
        await test("browser: a refused proof of work is solved again; a bar shows meanwhile on a 360 px phone", powRetry);
        await test("browser: without a proof of work asked, the page does none", powOff);
        await test("browser: 9 proofs of work on a CPU slowed 4 times", powTiming);
        await test(
            "browser: admin's wrong password shows the API's message and keeps no token; locked out, when to retry",
            adminWrongPassword,
        );
        await test(
            "browser: admin logs in, creates a voucher with the API's messages, watches a crowd buy, makes a queue sale, logs out",
            adminFlow,
        );
        await test("browser: admin marks a refund done after confirming; the audit log shows it and the voucher made", adminRecords);
        await test("browser: admin sees a sale's orders and downloads them as CSV, as MySQL has them", adminExport);
        await test("browser: admin pauses, resumes and restocks the selected sale with its buttons", adminControls);
    } finally {
        if (browser) await browser.close();
        await stopAll();
    }
    console.log(`     screenshots: ${path.relative(ROOT, SHOTS)}/ (binary ${path.relative(ROOT, BIN)})`);
    return summary("browser");
}

process.exitCode = await main();
