// a11y.mjs - axe-core's rules (@axe-core/playwright) on both pages in
// every state a buyer or an admin meets, at a phone's width (390x844)
// and a desktop's: the buyer logged out, logged in, before a sale (a
// countdown), during one, sold out, after buying, after cancelling; the
// admin logged out, and logged in with a live sale selected. No rule is
// turned off and no element left out. Each scan prints its violations
// by impact (rules, and in brackets the elements); a serious or critical
// one fails the test.
//
// Each state is set up through the API (the page's own session for the
// buyer's purchase and cancel) and the page loaded anew, so the scans do
// not depend on how the page's buttons work.

import AxeBuilder from "@axe-core/playwright";

import {
    RUN,
    adminAdd,
    assert,
    createVoucher,
    http,
    startSeckilld,
    stopAll,
    summary,
    test,
    timeIn,
    token,
} from "./lib.mjs";
import { DESKTOP, PHONE, assertNoProblems, launchChromium, newPage, waitFor } from "./pages.mjs";

const IMPACTS = ["critical", "serious", "moderate", "minor"];

let server;
let browser;
const totals = { scans: 0, critical: 0, serious: 0, moderate: 0, minor: 0 };

// Scan the page at both widths; print one line each; return the serious
// and critical violations found.
async function scan(page, name) {
    const grave = [];
    for (const [label, size] of [
        ["phone", PHONE],
        ["desktop", DESKTOP],
    ]) {
        await page.setViewportSize(size);
        await page.waitForTimeout(300); // a repaint after the resize
        const { violations } = await new AxeBuilder({ page }).analyze();
        const by = Object.fromEntries(IMPACTS.map((i) => [i, violations.filter((v) => v.impact === i)]));
        const counts = IMPACTS.map((i) => `${i}=${by[i].length}`).join(" ");
        const rules = violations.map((v) => `${v.id}:${v.impact}[${v.nodes.length}]`).join(" ");
        console.log(`a11y ${name} ${label}: ${counts}${rules ? " -- " + rules : ""}`);
        totals.scans++;
        for (const i of IMPACTS) totals[i] += by[i].length;
        for (const v of [...by.critical, ...by.serious])
            grave.push(`${name} ${label}: ${v.id} (${v.help}) at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
    }
    return grave;
}

const card = (page, id) => page.locator(`li.voucher[data-voucher-id="${id}"]`);

// The buyer's seven states.
async function buyerStates() {
    const shop = 2000000 + (RUN % 100000) * 5;
    const live = await createVoucher(server.url, {
        shopId: shop,
        title: "Flash: 50 off 47.50",
        subTitle: "today only",
        rules: "one per person",
        payValue: 4750,
        actualValue: 5000,
        type: "seckill",
        stock: 5000000,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    });
    const later = await createVoucher(server.url, {
        shopId: shop + 1,
        title: "Tonight: 20 off",
        payValue: 8000,
        actualValue: 10000,
        type: "seckill",
        stock: 100,
        beginTime: timeIn(7200),
        endTime: timeIn(10800),
    });
    const gone = await createVoucher(server.url, {
        shopId: shop + 2,
        title: "Last one: 90 off",
        payValue: 1000,
        actualValue: 10000,
        type: "seckill",
        stock: 1,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    });
    const other = await http(server.url, "POST", `/api/vouchers/${gone}/seckill`, { token: token(9700000000 + RUN) });
    assert(other.status === 201, `another buyer's purchase: ${other.status} ${other.text}`);

    const context = await browser.newContext({ viewport: PHONE });
    const page = await newPage(context);
    const open = async (s, id) => {
        await page.goto(`${server.url}/?shop=${s}`);
        await waitFor(() => card(page, id).isVisible(), `voucher ${id}`);
    };
    const grave = [];

    await open(shop, live);
    grave.push(...(await scan(page, "buyer/logged-out")));

    // Log in (development mode shows the code; no proof of work here).
    await page.fill("#phone", "133" + String(RUN % 100000000).padStart(8, "0"));
    await page.click("#send-code");
    await waitFor(() => page.isVisible("#login-button"), "the code's form");
    await waitFor(async () => (await page.inputValue("#code")).length === 6, "the development code");
    await page.click("#login-button");
    await waitFor(() => page.isVisible("#who"), "the logged-in header");
    await waitFor(async () => /No orders yet/.test(await page.textContent("#orders")), "my orders, empty");
    grave.push(...(await scan(page, "buyer/logged-in")));
    const session = await page.evaluate(() => JSON.parse(localStorage.getItem("seckill.session")));

    await open(shop + 1, later);
    await waitFor(async () => /\d/.test(await card(page, later).locator("button").textContent()), "the countdown");
    grave.push(...(await scan(page, "buyer/countdown")));

    await open(shop, live);
    await waitFor(() => card(page, live).locator("button").isEnabled(), "the buy button");
    grave.push(...(await scan(page, "buyer/on-sale")));

    await open(shop + 2, gone);
    await waitFor(async () => /Sold out/i.test(await card(page, gone).textContent()), "sold out");
    grave.push(...(await scan(page, "buyer/sold-out")));

    const bought = await http(server.url, "POST", `/api/vouchers/${live}/seckill`, { token: session.token });
    assert(bought.status === 201, `the purchase: ${bought.status} ${bought.text}`);
    const order = bought.json.orderId;
    await open(shop, live);
    const row = page.locator(`#order-list li[data-order-id="${order}"]`);
    await waitFor(() => row.count(), "the order");
    grave.push(...(await scan(page, "buyer/bought")));

    const cancelled = await http(server.url, "POST", `/api/orders/${order}/cancel`, { token: session.token });
    assert(cancelled.status === 200, `the cancel: ${cancelled.status} ${cancelled.text}`);
    await open(shop, live);
    await waitFor(async () => /Cancelled/.test(await row.textContent()), "the order cancelled");
    grave.push(...(await scan(page, "buyer/cancelled")));

    assertNoProblems(page);
    await context.close();
    assert(!grave.length, `serious or critical violations:\n  ${grave.join("\n  ")}`);
}

// The admin's two states; logged in, with a sale's orders and a refund
// to give back listed.
async function adminStates() {
    const shop = 2000000 + (RUN % 100000) * 5 + 3;
    const id = await createVoucher(server.url, {
        shopId: shop,
        title: "Admin's live sale",
        type: "seckill",
        stock: 40,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    });
    for (let i = 0; i < 3; i++) {
        const r = await http(server.url, "POST", `/api/vouchers/${id}/seckill`, { token: token(9710000000 + RUN * 10 + i) });
        assert(r.status === 201, `a purchase: ${r.status}`);
    }
    // A refund to give back: an order cancelled, then paid.
    const buyer = token(9720000000 + RUN);
    const bought = await http(server.url, "POST", `/api/vouchers/${id}/seckill`, { token: buyer });
    assert(bought.status === 201, `the purchase to refund: ${bought.status}`);
    await http(server.url, "POST", `/api/orders/${bought.json.orderId}/cancel`, { token: buyer });
    const paid = await http(server.url, "POST", `/api/orders/${bought.json.orderId}/pay`, { token: buyer });
    assert(paid.status === 409, `the payment of a cancelled order: ${paid.status}`);
    const username = `a11y-admin-${RUN}`;
    const password = `the a11y password ${RUN}`;
    adminAdd(username, password);
    const context = await browser.newContext({ viewport: PHONE });
    const page = await newPage(context);
    const grave = [];
    await page.goto(`${server.url}/admin`);
    await waitFor(() => page.isVisible("#login-form"), "the login form");
    grave.push(...(await scan(page, "admin/logged-out")));

    await page.fill("#username", username);
    await page.fill("#password", password);
    await page.click("#login-button");
    await waitFor(() => page.isVisible("#session"), "the session");
    await page.fill("#shop-id", String(shop));
    await page.click("#shop-form button");
    const row = page.locator(`#voucher-rows tr[data-voucher-id="${id}"]`);
    await waitFor(() => row.isVisible(), "the sale's row");
    await row.click();
    await waitFor(async () => (await page.locator("#sale-orders-rows tr").count()) === 4, "the sale's orders");
    await waitFor(async () => (await page.locator("#refund-rows tr").filter({ hasText: bought.json.orderId }).count()) === 1, "the refund");
    await waitFor(() => page.locator("#chart path.stock").count(), "the chart");
    grave.push(...(await scan(page, "admin/live-sale")));

    assertNoProblems(page);
    await context.close();
    assert(!grave.length, `serious or critical violations:\n  ${grave.join("\n  ")}`);
}

async function main() {
    try {
        server = await startSeckilld("a11y-seckilld", {
            SECKILL_DEV: "1",
            SECKILL_PAY_TIMEOUT_S: "900",
            SECKILL_POW_MAXNUMBER: "0",
        });
        browser = await launchChromium();
        await test("a11y: the buyer's page logged out, logged in, counting down, on sale, sold out, bought, cancelled", buyerStates);
        await test("a11y: the admin's page logged out, and logged in with a live sale", adminStates);
    } finally {
        if (browser) await browser.close();
        await stopAll();
    }
    const t = totals;
    console.log(
        `a11y total: ${t.scans} scans, critical=${t.critical} serious=${t.serious} moderate=${t.moderate} minor=${t.minor} (rules violated, summed over scans)`,
    );
    return summary("a11y");
}

process.exitCode = await main();
