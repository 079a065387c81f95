// openapi.mjs - docs/openapi.yaml against live traffic.
//
// Two real seckilld instances (one healthy, one whose Redis is gone, for
// the 503s) sit behind a small router, and Stoplight Prism proxies to it
// in two modes, both validating every request and answer against the
// document:
//
//   strict   `prism proxy --errors`: a request or an answer that deviates
//            from the document becomes Prism's own 422/500, so the
//            expected status is not met and the case fails;
//   lenient  without --errors, for requests that are themselves outside
//            the document on purpose (a bad id, a missing token, a body
//            that breaks a field's rule), which Prism would otherwise
//            refuse before the service sees them: they are forwarded, and
//            the case fails when Prism's sl-violations header reports
//            anything about the answer (and also when it reports nothing
//            about the request, which would mean the document allows
//            what the service refuses).
//
// The cases cover every operation and every error code that a client can
// cause from outside (not METHOD_NOT_ALLOWED and unknown paths, which
// have no operation to check against; not NOT_IMPLEMENTED and the
// framing 400s, which need requests Prism's own HTTP parser refuses; not
// INTERNAL, a bug); tests/it/test_http.c and test_web.c check those.
//
// Finally a canary: a third proxy with a copy of the document in which
// two answers are described wrongly must catch both, so this check can
// fail.

import { createHash, createHmac } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";

import {
    LOG_DIR,
    ROOT,
    adminAdd,
    RUN,
    assert,
    createVoucher,
    freePort,
    redis,
    http as call,
    mysql,
    start,
    startSeckilld,
    stopAll,
    summary,
    test,
    timeIn,
    token,
} from "./lib.mjs";

const SPEC = path.join(ROOT, "docs/openapi.yaml");
const PRISM = path.join(ROOT, "tests/node_modules/.bin/prism");
const ALLOWED_ORIGIN = "http://allowed.example";
// The payment provider's key (SECKILL_PAY_SECRET) of the test instances.
const PAY_SECRET = "7061792d7365637265742d6f662d7468652d636f6e74726163742d746573742e";
// Reachable through the proxy only with a request Prism cannot send, or
// not at all (see above); URI_TOO_LONG and HEADERS_TOO_LARGE, like
// METHOD_NOT_ALLOWED, are ones any path can answer (the document's
// introduction), tested in tests/it/test_hostile.c and
// tests/it/test_web.c.
const UNREACHABLE_CODES = new Set([
    "METHOD_NOT_ALLOWED",
    "NOT_IMPLEMENTED",
    "INTERNAL",
    "URI_TOO_LONG",
    "HEADERS_TOO_LARGE",
]);

// ---- servers ----

// Forward every request to the healthy instance, or to the one its
// "X-Upstream" header names ("broken", "quick").
function startRouter(main, others) {
    return new Promise((resolve) => {
        const srv = http.createServer((req, res) => {
            const to = others[req.headers["x-upstream"]] || main;
            const headers = { ...req.headers };
            delete headers["x-upstream"];
            const up = http.request(
                { host: "127.0.0.1", port: to, method: req.method, path: req.url, headers },
                (r) => {
                    res.writeHead(r.statusCode, r.rawHeaders);
                    r.pipe(res);
                },
            );
            up.on("error", (e) => {
                if (res.headersSent) return; // after the answer: its close
                res.writeHead(599, { "content-type": "text/plain" });
                res.end("router: " + e.message);
            });
            // A body the service refuses by its declared length (above
            // 64 KiB) is answered 413 on the headers alone, and the
            // connection closed: sending the body would race that close
            // (EPIPE). Send the headers only and drop the body here.
            if (Number(req.headers["content-length"] || 0) > 64 * 1024) {
                up.flushHeaders();
                req.resume();
                return;
            }
            req.pipe(up);
        });
        srv.listen(0, "127.0.0.1", () => resolve(srv));
    });
}

async function startPrism(tag, spec, upstream, errors) {
    const port = await freePort();
    const args = ["proxy", spec, upstream, "--port", String(port), "--host", "127.0.0.1", "--cors=false"];
    if (errors) args.push("--errors");
    const child = start(tag, PRISM, args);
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
        if (child.code !== null) throw new Error(`${tag} exited; see ${child.log}`);
        if (child.output.includes("Prism is listening")) break;
        await new Promise((r) => setTimeout(r, 100));
    }
    return `http://127.0.0.1:${port}`;
}

// ---- the cases ----

const seen = { operations: new Set(), codes: new Set() };
const failures = [];
let sent = 0;

function violations(res) {
    const v = res.headers.get("sl-violations");
    if (!v) return [];
    try {
        return JSON.parse(v);
    } catch {
        return [{ location: ["unparsed"], message: v }];
    }
}

// Send one case through its proxy and check it. c: {name, via, method,
// path, op (the operation, "GET /api/vouchers/{id}"), status, code,
// body, token, headers}.
async function check(proxies, c) {
    return verify(c, await send(proxies, c));
}

async function send(proxies, c) {
    const headers = { ...(c.headers || {}) };
    if (c.broken) headers["X-Upstream"] = "broken";
    if (c.quick) headers["X-Upstream"] = "quick";
    sent++;
    return call(proxies[c.via], c.method, c.path, { body: c.body, token: c.token, headers });
}

// Check an answer res to case c (see check()).
function verify(c, res) {
    const v = violations(res);
    const code = res.json && res.json.error && res.json.error.code;
    const problems = [];
    if (res.status !== c.status) problems.push(`status ${res.status}, want ${c.status}`);
    if (c.code && code !== c.code) problems.push(`code ${code}, want ${c.code}`);
    if (c.via === "strict" && v.length) problems.push("violations in strict mode");
    const answer = v.filter((x) => x.location && x.location[0] === "response");
    if (answer.length) problems.push("the answer deviates from the document");
    if (c.via === "lenient" && !v.some((x) => x.location && x.location[0] === "request"))
        problems.push("the document accepts this request, but the service refuses it");
    if (problems.length) {
        failures.push(
            `${c.name}: ${c.method} ${c.path} via ${c.via}: ${problems.join("; ")}\n` +
                `      violations: ${JSON.stringify(v)}\n      body: ${res.text.slice(0, 300)}`,
        );
    } else {
        seen.operations.add(c.op);
        if (code) seen.codes.add(code);
    }
    return res;
}

function specOperations() {
    const doc = JSON.parse(readFileSync(path.join(ROOT, "docs/openapi.json"), "utf8"));
    const ops = [];
    for (const [p, item] of Object.entries(doc.paths))
        for (const m of ["get", "post", "patch", "delete", "options"]) if (item[m]) ops.push(`${m.toUpperCase()} ${p}`);
    return { doc, ops, codes: doc.components.schemas.ErrorCode.enum };
}

async function runCases(proxies, redisCli, main) {
    const shop = 700000 + (RUN % 100000);
    const admin = token(1, true);
    const base = 9100000000 + (RUN % 1000000) * 100;
    const user = (k) => token(base + k);
    const S = "strict";
    const L = "lenient";

    // Probes.
    await check(proxies, { name: "healthz", via: S, method: "GET", path: "/healthz", op: "GET /healthz", status: 200 });
    await check(proxies, { name: "readyz", via: S, method: "GET", path: "/readyz", op: "GET /readyz", status: 200 });
    await check(proxies, {
        name: "readyz, Redis gone",
        via: S,
        broken: true,
        method: "GET",
        path: "/readyz",
        op: "GET /readyz",
        status: 503,
        code: "UNAVAILABLE",
    });
    await check(proxies, { name: "metrics", via: S, method: "GET", path: "/metrics", op: "GET /metrics", status: 200 });

    // Login.
    const phone = "139" + String(RUN % 100000000).padStart(8, "0");
    const codeRes = await check(proxies, {
        name: "login code",
        via: S,
        method: "POST",
        path: "/api/auth/code",
        op: "POST /api/auth/code",
        body: { phone },
        status: 200,
    });
    const code = codeRes.json && codeRes.json.code;
    assert(code, "SECKILL_DEV=1 must echo the login code");
    const wrong = code === "000000" ? "111111" : "000000";
    await check(proxies, {
        name: "login, wrong code",
        via: S,
        method: "POST",
        path: "/api/auth/login",
        op: "POST /api/auth/login",
        body: { phone, code: wrong },
        status: 401,
        code: "UNAUTHORIZED",
    });
    const login = await check(proxies, {
        name: "login",
        via: S,
        method: "POST",
        path: "/api/auth/login",
        op: "POST /api/auth/login",
        body: { phone, code },
        status: 200,
    });
    const me = login.json.token;
    await check(proxies, {
        name: "login code, bad phone",
        via: L,
        method: "POST",
        path: "/api/auth/code",
        op: "POST /api/auth/code",
        body: { phone: "12" },
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "login, malformed code",
        via: L,
        method: "POST",
        path: "/api/auth/login",
        op: "POST /api/auth/login",
        body: { phone, code: "12ab" },
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "login code, Redis gone",
        via: S,
        broken: true,
        method: "POST",
        path: "/api/auth/code",
        op: "POST /api/auth/code",
        body: { phone },
        status: 503,
        code: "UNAVAILABLE",
    });
    await check(proxies, {
        name: "login code, body above 64 KiB",
        via: S,
        method: "POST",
        path: "/api/auth/code",
        op: "POST /api/auth/code",
        body: { phone, pad: "x".repeat(70 * 1024) },
        status: 413,
        code: "PAYLOAD_TOO_LARGE",
    });
    await check(proxies, {
        name: "login code, a JSON object sent as text/plain",
        via: L,
        method: "POST",
        path: "/api/auth/code",
        op: "POST /api/auth/code",
        body: JSON.stringify({ phone }),
        headers: { "Content-Type": "text/plain" },
        status: 415,
        code: "UNSUPPORTED_MEDIA_TYPE",
    });

    // Vouchers: create.
    const seckill = {
        shopId: shop,
        title: "contract seckill",
        subTitle: "sub",
        rules: "one per user",
        payValue: 4750,
        actualValue: 5000,
        type: "seckill",
        stock: 10,
        beginTime: timeIn(-60),
        endTime: timeIn(3600),
    };
    const created = await check(proxies, {
        name: "create a seckill voucher",
        via: S,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: seckill,
        token: admin,
        status: 201,
    });
    const onSale = created.json.id;
    const normalRes = await check(proxies, {
        name: "create a normal voucher",
        via: S,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: { shopId: shop, title: "contract normal", payValue: 900, actualValue: 1000 },
        token: admin,
        status: 201,
    });
    const normal = normalRes.json.id;
    await check(proxies, {
        name: "create as a user",
        via: S,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: seckill,
        token: user(1),
        status: 403,
        code: "FORBIDDEN",
    });
    await check(proxies, {
        name: "create without a token",
        via: L,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: seckill,
        status: 401,
        code: "UNAUTHORIZED",
    });
    await check(proxies, {
        name: "create without stock",
        via: L,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: { ...seckill, stock: undefined },
        token: admin,
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "create, title too long",
        via: L,
        method: "POST",
        path: "/api/vouchers",
        op: "POST /api/vouchers",
        body: { ...seckill, title: "t".repeat(256) },
        token: admin,
        status: 400,
        code: "BAD_REQUEST",
    });

    // Vouchers: read.
    await check(proxies, {
        name: "list a shop",
        via: S,
        method: "GET",
        path: `/api/vouchers?shopId=${shop}&limit=5`,
        op: "GET /api/vouchers",
        status: 200,
    });
    await check(proxies, { name: "list all", via: S, method: "GET", path: "/api/vouchers", op: "GET /api/vouchers", status: 200 });
    await check(proxies, {
        name: "list, limit 0",
        via: L,
        method: "GET",
        path: "/api/vouchers?limit=0",
        op: "GET /api/vouchers",
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "list, shopId not a number",
        via: L,
        method: "GET",
        path: "/api/vouchers?shopId=abc",
        op: "GET /api/vouchers",
        status: 400,
        code: "BAD_REQUEST",
    });
    for (const [name, id] of [
        ["a seckill voucher", onSale],
        ["a normal voucher", normal],
    ])
        await check(proxies, {
            name: `read ${name}`,
            via: S,
            method: "GET",
            path: `/api/vouchers/${id}`,
            op: "GET /api/vouchers/{id}",
            status: 200,
        });
    await check(proxies, {
        name: "read a voucher that does not exist",
        via: S,
        method: "GET",
        path: "/api/vouchers/999999999999",
        op: "GET /api/vouchers/{id}",
        status: 404,
        code: "NOT_FOUND",
    });
    await check(proxies, {
        name: "read a voucher, bad id",
        via: L,
        method: "GET",
        path: "/api/vouchers/abc",
        op: "GET /api/vouchers/{id}",
        status: 400,
        code: "BAD_REQUEST",
    });

    // Buying: every outcome.
    const buy = (name, via, id, tok, status, codeWant, extra = {}) =>
        check(proxies, {
            name,
            via,
            method: "POST",
            path: `/api/vouchers/${id}/seckill`,
            op: "POST /api/vouchers/{id}/seckill",
            token: tok,
            status,
            code: codeWant,
            ...extra,
        });
    const bought = await buy("buy", S, onSale, me, 201);
    await buy("buy again", S, onSale, me, 409, "ALREADY_PURCHASED");
    await buy("buy a normal voucher", S, normal, me, 409, "NOT_SECKILL");
    const later = await createVoucher(proxies.direct, { ...seckill, beginTime: timeIn(3600), endTime: timeIn(7200) });
    await buy("buy before the start", S, later, me, 409, "NOT_STARTED");
    const over = await createVoucher(proxies.direct, { ...seckill, beginTime: timeIn(-7200), endTime: timeIn(-3600) });
    await buy("buy after the end", S, over, me, 409, "ENDED");
    const last = await createVoucher(proxies.direct, { ...seckill, stock: 1 });
    await buy("buy the last one", S, last, user(2), 201);
    await buy("buy when sold out", S, last, user(3), 409, "SOLD_OUT");
    await buy("buy what does not exist", S, "999999999999", me, 404, "NOT_FOUND");
    await buy("buy without a token", L, onSale, undefined, 401, "UNAUTHORIZED");
    await buy("buy, bad id", L, "0", me, 400, "BAD_REQUEST");
    // The user's purchase lock of this voucher held elsewhere: BUSY
    // (sale_lock_name() in sale/sale.h).
    const lockKey = `lock:order:{v:${onSale}}:${base + 4}`;
    redisCli("SET", lockKey, "held-by-the-test", "PX", "30000");
    try {
        await buy("buy while another purchase runs", S, onSale, user(4), 429, "BUSY");
    } finally {
        redisCli("DEL", lockKey);
    }
    await buy("buy, Redis gone", S, onSale, user(5), 503, "UNAVAILABLE", { broken: true });

    // A flash sale's numbers.
    const stats = (name, via, id, tok, status, codeWant) =>
        check(proxies, {
            name,
            via,
            method: "GET",
            path: `/api/vouchers/${id}/stats`,
            op: "GET /api/vouchers/{id}/stats",
            token: tok,
            status,
            code: codeWant,
        });
    await stats("stats", S, onSale, admin, 200);
    await stats("stats as a user", S, onSale, me, 403, "FORBIDDEN");
    await stats("stats of a normal voucher", S, normal, admin, 404, "NOT_FOUND");
    await stats("stats without a token", L, onSale, undefined, 401, "UNAUTHORIZED");
    await stats("stats, bad id", L, "x", admin, 400, "BAD_REQUEST");

    // The operator's controls of a sale (their own vouchers: the cases
    // below keep buying onSale).
    const ctl = (name, via, method, id, tail, tok, status, codeWant, body) =>
        check(proxies, {
            name,
            via,
            method,
            path: `/api/vouchers/${id}${tail}`,
            op: `${method} /api/vouchers/{id}${tail}`,
            token: tok,
            status,
            code: codeWant,
            body,
        });
    const run = await createVoucher(proxies.direct, { ...seckill, stock: 3 });
    await ctl("pause", S, "POST", run, "/pause", admin, 200);
    await buy("buy while paused", S, run, user(20), 409, "SALE_PAUSED");
    await ctl("pause as a user", S, "POST", run, "/pause", me, 403, "FORBIDDEN");
    await ctl("pause without a token", L, "POST", run, "/pause", undefined, 401, "UNAUTHORIZED");
    await ctl("pause what does not exist", S, "POST", "999999999999", "/pause", admin, 404, "NOT_FOUND");
    await ctl("pause a normal voucher", S, "POST", normal, "/pause", admin, 400, "BAD_REQUEST");
    await ctl("resume", S, "POST", run, "/resume", admin, 200);
    await ctl("resume, bad id", L, "POST", "x", "/resume", admin, 400, "BAD_REQUEST");
    await ctl("restock", S, "POST", run, "/restock", admin, 200, undefined, { add: 5 });
    await ctl("restock nothing", L, "POST", run, "/restock", admin, 400, "BAD_REQUEST", { add: 0 });
    await ctl("restock as a user", S, "POST", run, "/restock", me, 403, "FORBIDDEN", { add: 1 });
    // Idempotency-Key: the same change again answers as the first did,
    // another request with the key is 422, and a key whose change has
    // not answered yet (recorded here by hand, as a change still running
    // leaves it) is 409.
    {
        const keyed = (name, status, codeWant, body, key) =>
            check(proxies, {
                name,
                via: S,
                method: "POST",
                path: `/api/vouchers/${run}/restock`,
                op: "POST /api/vouchers/{id}/restock",
                token: admin,
                status,
                code: codeWant,
                body,
                headers: { "Idempotency-Key": key },
            });
        const key = `web-${Date.now()}`;
        await keyed("restock with a key", 200, undefined, { add: 1 }, key);
        await keyed("the same restock again", 200, undefined, { add: 1 }, key);
        await keyed("the key with another body", 422, "IDEMPOTENCY_KEY_REUSED", { add: 2 }, key);
        const running = `web-running-${Date.now()}`;
        const hash = createHash("sha256")
            .update(`POST\0/api/vouchers/${run}/restock\0${JSON.stringify({ add: 1 })}`)
            .digest("hex");
        mysql(
            "INSERT INTO idempotency_keys (admin_id, idem_key, request_hash, action, target_type, target_id) " +
                `VALUES (1, '${running}', UNHEX('${hash}'), 'voucher.restock', 'voucher', ${run})`,
        );
        await keyed("a key whose change still runs", 409, "IDEMPOTENCY_KEY_IN_USE", { add: 1 }, running);
    }
    await ctl("edit a started sale's text", S, "PATCH", run, "", admin, 200, undefined, { title: "renamed" });
    await ctl("edit a started sale's price", S, "PATCH", run, "", admin, 409, "SALE_STARTED", { payValue: 4000 });
    await ctl("edit an unknown field", L, "PATCH", run, "", admin, 400, "BAD_REQUEST", { colour: "red" });
    await ctl("edit without a token", L, "PATCH", run, "", undefined, 401, "UNAUTHORIZED", { title: "x" });
    await ctl("delete a started sale", S, "DELETE", run, "", admin, 409, "SALE_STARTED");
    await ctl("stop", S, "POST", run, "/stop", admin, 200);
    await ctl("stop again", S, "POST", run, "/stop", admin, 409, "ENDED");
    await ctl("resume a stopped sale", S, "POST", run, "/resume", admin, 409, "ENDED");
    const ahead = await createVoucher(proxies.direct, { ...seckill, beginTime: timeIn(3600), endTime: timeIn(7200) });
    await ctl("edit before the start", S, "PATCH", ahead, "", admin, 200, undefined, { stock: 7, payValue: 4000 });
    await ctl("delete as a user", S, "DELETE", ahead, "", me, 403, "FORBIDDEN");
    await ctl("delete before the start", S, "DELETE", ahead, "", admin, 204);
    await ctl("delete what does not exist", S, "DELETE", ahead, "", admin, 404, "NOT_FOUND");
    // The counters, for the admin page.
    const counters = (name, via, tok, status, codeWant) =>
        check(proxies, { name, via, method: "GET", path: "/api/admin/metrics", op: "GET /api/admin/metrics", token: tok, status, code: codeWant });
    await counters("admin metrics", S, admin, 200);
    await counters("admin metrics as a user", S, me, 403, "FORBIDDEN");
    await counters("admin metrics without a token", L, undefined, 401, "UNAUTHORIZED");

    // An order's life: pay (the simulated provider), cancel.
    const orderOp = (name, via, verb, id, tok, status, codeWant, extra = {}) =>
        check(proxies, {
            name,
            via,
            method: "POST",
            path: `/api/orders/${id}/${verb}`,
            op: `POST /api/orders/{id}/${verb}`,
            token: tok,
            status,
            code: codeWant,
            ...extra,
        });
    const cancellable = await createVoucher(proxies.direct, { ...seckill, stock: 3 });
    const second = await buy("buy another", S, cancellable, me, 201);
    const toCancel = second.json.orderId;
    const paidId = bought.json.orderId;
    await orderOp("pay", S, "pay", paidId, me, 200);
    await orderOp("pay again", S, "pay", paidId, me, 200);
    await orderOp("cancel a paid order", S, "cancel", paidId, me, 409, "ORDER_PAID");
    await orderOp("cancel", S, "cancel", toCancel, me, 200);
    await orderOp("cancel again", S, "cancel", toCancel, admin, 200);
    await orderOp("pay a cancelled order", S, "pay", toCancel, me, 409, "ORDER_CLOSED");
    await orderOp("pay someone else's order", S, "pay", toCancel, user(6), 404, "NOT_FOUND");
    await orderOp("cancel someone else's order", S, "cancel", paidId, user(6), 404, "NOT_FOUND");
    await orderOp("cancel without a token", L, "cancel", paidId, undefined, 401, "UNAUTHORIZED");
    await orderOp("pay, bad id", L, "pay", "-1", me, 400, "BAD_REQUEST");

    // The payment provider's notification, signed.
    const notify = (name, via, note, status, codeWant, signature) => {
        const body = JSON.stringify(note);
        const sig = signature ?? createHmac("sha256", Buffer.from(PAY_SECRET, "hex")).update(body).digest("hex");
        return check(proxies, {
            name,
            via,
            method: "POST",
            path: "/api/payments/notify",
            op: "POST /api/payments/notify",
            body,
            headers: sig ? { "X-Signature": sig } : {},
            status,
            code: codeWant,
        });
    };
    const o8 = (await buy("buy for the provider", S, cancellable, user(8), 201)).json.orderId;
    const o9 = (await buy("buy for the provider, 2", S, onSale, user(9), 201)).json.orderId;
    const txn = `contract-${RUN}`;
    await notify("notify", S, { orderId: o8, amount: 4750, txnId: txn }, 200);
    await notify("notify again", S, { orderId: o8, amount: 4750, txnId: txn }, 200);
    await notify("notify, another transaction", S, { orderId: o8, amount: 4750, txnId: txn + "b" }, 409, "ORDER_PAID");
    await notify("notify, wrong amount", S, { orderId: o9, amount: 1, txnId: txn + "c" }, 400, "BAD_REQUEST");
    await notify("notify, a used transaction", S, { orderId: o9, amount: 4750, txnId: txn }, 400, "BAD_REQUEST");
    await notify("notify, a cancelled order", S, { orderId: toCancel, amount: 4750, txnId: txn + "d" }, 409, "ORDER_CLOSED");
    await notify("notify, no such order", S, { orderId: "999999999999", amount: 4750, txnId: txn + "e" }, 404, "NOT_FOUND");
    await notify("notify, forged", S, { orderId: o9, amount: 4750, txnId: txn + "f" }, 401, "UNAUTHORIZED", "0".repeat(64));
    await notify("notify, unsigned", L, { orderId: o9, amount: 4750, txnId: txn + "g" }, 401, "UNAUTHORIZED", "");

    // An order whose deadline passes (the instance with a 1 s timeout).
    const late = (await buy("buy with a 1 s deadline", S, onSale, user(10), 201, undefined, { quick: true })).json
        .orderId;
    const deadline = Date.now() + 20000;
    let expired = false;
    while (!expired && Date.now() < deadline) {
        const r = await call(main.url, "GET", `/api/orders/${late}`, { token: user(10) });
        expired = r.json && r.json.status === "expired";
        if (!expired) await new Promise((res) => setTimeout(res, 200));
    }
    assert(expired, `order ${late} did not expire within 20 s of its 1 s deadline`);
    await check(proxies, {
        name: "an expired order",
        via: S,
        method: "GET",
        path: `/api/orders/${late}`,
        op: "GET /api/orders/{id}",
        token: user(10),
        status: 200,
    });
    await orderOp("cancel an expired order", S, "cancel", late, user(10), 409, "ORDER_CLOSED");

    // Orders.
    await check(proxies, {
        name: "my orders",
        via: S,
        method: "GET",
        path: "/api/orders?limit=10",
        op: "GET /api/orders",
        token: me,
        status: 200,
    });
    const orderId = bought.json.orderId;
    await check(proxies, {
        name: "my order",
        via: S,
        method: "GET",
        path: `/api/orders/${orderId}`,
        op: "GET /api/orders/{id}",
        token: me,
        status: 200,
    });
    await check(proxies, {
        name: "an order, as an admin",
        via: S,
        method: "GET",
        path: `/api/orders/${orderId}`,
        op: "GET /api/orders/{id}",
        token: admin,
        status: 200,
    });
    await check(proxies, {
        name: "someone else's order",
        via: S,
        method: "GET",
        path: `/api/orders/${orderId}`,
        op: "GET /api/orders/{id}",
        token: user(6),
        status: 404,
        code: "NOT_FOUND",
    });
    await check(proxies, {
        name: "orders without a token",
        via: L,
        method: "GET",
        path: "/api/orders",
        op: "GET /api/orders",
        status: 401,
        code: "UNAUTHORIZED",
    });
    await check(proxies, {
        name: "orders, limit 101",
        via: L,
        method: "GET",
        path: "/api/orders?limit=101",
        op: "GET /api/orders",
        token: me,
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "an order, bad id",
        via: L,
        method: "GET",
        path: "/api/orders/x1",
        op: "GET /api/orders/{id}",
        token: me,
        status: 400,
        code: "BAD_REQUEST",
    });

    // The per-user rate limit (20 a second, bursts of 40): one user asks
    // until refused; every answer on the way is checked too.
    const hasty = { via: S, method: "GET", path: "/api/orders?limit=1", op: "GET /api/orders", token: user(7) };
    let limited = false;
    for (let i = 0; i < 400 && !limited; i++) {
        const r = await send(proxies, hasty);
        limited = r.status === 429;
        const before = failures.length;
        if (limited) verify({ ...hasty, name: "rate limited", status: 429, code: "RATE_LIMITED" }, r);
        else verify({ ...hasty, name: `before the rate limit (${i})`, status: 200 }, r);
        if (failures.length > before) break;
    }
    assert(limited, "400 requests of one user were never rate limited");

    // The pages and this document.
    const page = await check(proxies, { name: "buyer's page", via: S, method: "GET", path: "/", op: "GET /", status: 200 });
    await check(proxies, {
        name: "buyer's page, not modified",
        via: S,
        method: "GET",
        path: "/",
        op: "GET /",
        headers: { "If-None-Match": page.headers.get("etag") },
        status: 304,
    });
    await check(proxies, { name: "admin's page", via: S, method: "GET", path: "/admin", op: "GET /admin", status: 200 });
    for (const f of ["app.css", "api.js", "favicon.svg"])
        await check(proxies, {
            name: `file ${f}`,
            via: S,
            method: "GET",
            path: `/static/${f}`,
            op: "GET /static/{file}",
            status: 200,
        });
    await check(proxies, {
        name: "a file that does not exist",
        via: S,
        method: "GET",
        path: "/static/nope.js",
        op: "GET /static/{file}",
        status: 404,
        code: "NOT_FOUND",
    });
    await check(proxies, {
        name: "this document",
        via: S,
        method: "GET",
        path: "/openapi.json",
        op: "GET /openapi.json",
        status: 200,
    });

    // Proof of work: the quick instance asks for it before a code.
    {
        const powPhone = "+8525" + String(RUN % 10000000).padStart(7, "0");
        redisCli("DEL", "sms:budget:852");
        const chal = await check(proxies, { name: "pow challenge", via: S, quick: true, method: "GET", path: "/api/pow", op: "GET /api/pow", status: 200 });
        await check(proxies, {
            name: "login code without a proof of work",
            via: S,
            quick: true,
            method: "POST",
            path: "/api/auth/code",
            op: "POST /api/auth/code",
            body: { phone: powPhone },
            status: 403,
            code: "POW_REQUIRED",
        });
        const solve = (c) => {
            let number = -1;
            for (let i = 0; i <= c.maxnumber; i++)
                if (createHash("sha256").update(c.salt + i).digest("hex") === c.challenge) {
                    number = i;
                    break;
                }
            assert(number >= 0, "the challenge has no solution");
            return Buffer.from(
                JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number, salt: c.salt, signature: c.signature }),
            ).toString("base64");
        };
        const solution = solve(chal.json);
        await check(proxies, {
            name: "login code with a proof of work",
            via: S,
            quick: true,
            method: "POST",
            path: "/api/auth/code",
            op: "POST /api/auth/code",
            body: { phone: powPhone },
            headers: { "Seckill-PoW": solution },
            status: 200,
        });
        // The country's budget of a code a minute is spent: the next
        // asks for a harder proof of work, then 429 SMS_BUDGET.
        const other = "+8526" + String(RUN % 10000000).padStart(7, "0");
        const harder = await check(proxies, {
            name: "login code, a harder proof of work",
            via: S,
            quick: true,
            method: "POST",
            path: "/api/auth/code",
            op: "POST /api/auth/code",
            body: { phone: other },
            status: 403,
            code: "POW_REQUIRED",
        });
        assert(harder.json.error.details.maxnumber > chal.json.maxnumber, "the challenge did not grow");
        await check(proxies, {
            name: "login code over the SMS budget",
            via: S,
            quick: true,
            method: "POST",
            path: "/api/auth/code",
            op: "POST /api/auth/code",
            body: { phone: other },
            headers: { "Seckill-PoW": solve(harder.json.error.details) },
            status: 429,
            code: "SMS_BUDGET",
        });
        await check(proxies, {
            name: "login code for a country codes do not go to",
            via: S,
            quick: true,
            method: "POST",
            path: "/api/auth/code",
            op: "POST /api/auth/code",
            body: { phone: "13800138000" },
            status: 400,
            code: "BAD_REQUEST",
        });
    }

    // A queue sale's waiting room: join, read the place, and a purchase
    // without its ticket.
    {
        const queued = await createVoucher(proxies.direct, { ...seckill, admission: "queue", beginTime: timeIn(-1) });
        const qpath = `/api/vouchers/${queued}/queue`;
        const buyer = user(95);
        await check(proxies, { name: "join a waiting room", via: S, method: "POST", path: qpath, op: "POST /api/vouchers/{id}/queue", token: buyer, status: 202 });
        await check(proxies, { name: "a place in a waiting room", via: S, method: "GET", path: qpath, op: "GET /api/vouchers/{id}/queue", token: buyer, status: 200 });
        await check(proxies, {
            name: "a place, read again at once",
            via: S,
            method: "GET",
            path: qpath,
            op: "GET /api/vouchers/{id}/queue",
            token: buyer,
            status: 429,
            code: "RATE_LIMITED",
        });
        await check(proxies, {
            name: "buy a queue sale without a ticket",
            via: S,
            method: "POST",
            path: `/api/vouchers/${queued}/seckill`,
            op: "POST /api/vouchers/{id}/seckill",
            token: buyer,
            status: 403,
            code: "TICKET_REQUIRED",
        });
        await check(proxies, {
            name: "join an open sale's waiting room",
            via: S,
            method: "POST",
            path: `/api/vouchers/${onSale}/queue`,
            op: "POST /api/vouchers/{id}/queue",
            token: buyer,
            status: 404,
            code: "NOT_FOUND",
        });
    }

    // Refunds: the list, and one that does not exist.
    await check(proxies, { name: "refunds", via: S, method: "GET", path: "/api/refunds?status=all&limit=5", op: "GET /api/refunds", token: admin, status: 200 });
    await check(proxies, {
        name: "a refund that does not exist",
        via: S,
        method: "POST",
        path: "/api/refunds/999999999999/done",
        op: "POST /api/refunds/{id}/done",
        token: admin,
        status: 404,
        code: "NOT_FOUND",
    });

    // The pages' settings.
    await check(proxies, { name: "the pages' settings", via: S, method: "GET", path: "/api/config", op: "GET /api/config", status: 200 });

    // The audit log: a page (the vouchers made above are in it), and a
    // filter it refuses.
    await check(proxies, { name: "audit log", via: S, method: "GET", path: "/api/audit?limit=5", op: "GET /api/audit", token: admin, status: 200 });
    await check(proxies, { name: "audit of one voucher", via: S, method: "GET", path: "/api/audit?targetType=voucher&targetId=1&limit=5", op: "GET /api/audit", token: admin, status: 200 });
    await check(proxies, {
        name: "audit with a bad filter",
        via: L,
        method: "GET",
        path: "/api/audit?targetType=shop",
        op: "GET /api/audit",
        token: admin,
        status: 400,
        code: "BAD_REQUEST",
    });
    // The sales listing: both lists, a page after a cursor, a bad status.
    await check(proxies, { name: "sales on now", via: S, method: "GET", path: "/api/sales", op: "GET /api/sales", status: 200 });
    {
        const first = await check(proxies, {
            name: "sales beginning soon, one a page",
            via: S,
            method: "GET",
            path: `/api/sales?status=upcoming&within=2592000&limit=1`,
            op: "GET /api/sales",
            status: 200,
        });
        const next = first.json && first.json.nextCursor;
        if (next)
            await check(proxies, {
                name: "sales, the next page",
                via: S,
                method: "GET",
                path: `/api/sales?status=upcoming&within=2592000&limit=1&cursor=${encodeURIComponent(next)}`,
                op: "GET /api/sales",
                status: 200,
            });
        await check(proxies, {
            name: "sales of a shop",
            via: S,
            method: "GET",
            path: `/api/sales?status=live&shopId=${shop}`,
            op: "GET /api/sales",
            status: 200,
        });
    }
    await check(proxies, {
        name: "sales, a status that is not one",
        via: L,
        method: "GET",
        path: "/api/sales?status=ended",
        op: "GET /api/sales",
        status: 400,
        code: "BAD_REQUEST",
    });
    await check(proxies, {
        name: "sales, a cursor that is not one",
        via: L,
        method: "GET",
        path: "/api/sales?cursor=x",
        op: "GET /api/sales",
        status: 400,
        code: "BAD_REQUEST",
    });
    {
        const page = await check(proxies, { name: "vouchers, one a page", via: S, method: "GET", path: "/api/vouchers?limit=1", op: "GET /api/vouchers", status: 200 });
        const next = page.json && page.json.nextCursor;
        if (next)
            await check(proxies, {
                name: "vouchers, the next page",
                via: S,
                method: "GET",
                path: `/api/vouchers?limit=1&cursor=${next}`,
                op: "GET /api/vouchers",
                status: 200,
            });
    }

    // A sale's orders (admin): a page, the CSV, and who may not.
    {
        const ordersPath = `/api/vouchers/${onSale}/orders`;
        await check(proxies, { name: "a sale's orders", via: S, method: "GET", path: `${ordersPath}?limit=5`, op: "GET /api/vouchers/{id}/orders", token: admin, status: 200 });
        await check(proxies, {
            name: "a sale's paid orders",
            via: S,
            method: "GET",
            path: `${ordersPath}?status=paid`,
            op: "GET /api/vouchers/{id}/orders",
            token: admin,
            status: 200,
        });
        const csv = await check(proxies, {
            name: "a sale's orders as CSV",
            via: S,
            method: "GET",
            path: ordersPath,
            op: "GET /api/vouchers/{id}/orders",
            token: admin,
            headers: { Accept: "text/csv" },
            status: 200,
        });
        if (!/^orderId,userId,status,amount,createTime,payDeadline,payTime,closeTime\n/.test(csv.text))
            failures.push(`a sale's orders as CSV: the body begins ${JSON.stringify(csv.text.slice(0, 80))}`);
        await check(proxies, {
            name: "a sale's orders, no token",
            via: L,
            method: "GET",
            path: ordersPath,
            op: "GET /api/vouchers/{id}/orders",
            status: 401,
            code: "UNAUTHORIZED",
        });
        await check(proxies, {
            name: "a sale's orders, a buyer",
            via: S,
            method: "GET",
            path: ordersPath,
            op: "GET /api/vouchers/{id}/orders",
            token: user(60),
            status: 403,
            code: "FORBIDDEN",
        });
        await check(proxies, {
            name: "a sale's orders, no such voucher",
            via: S,
            method: "GET",
            path: "/api/vouchers/999999999999/orders",
            op: "GET /api/vouchers/{id}/orders",
            token: admin,
            status: 404,
            code: "NOT_FOUND",
        });
        await check(proxies, {
            name: "a sale's orders, a status that is not one",
            via: L,
            method: "GET",
            path: `${ordersPath}?status=lost`,
            op: "GET /api/vouchers/{id}/orders",
            token: admin,
            status: 400,
            code: "BAD_REQUEST",
        });
    }

    // An admin's login.
    {
        const username = `openapi-${RUN}`;
        adminAdd(username, "a password of the test");
        await check(proxies, {
            name: "admin login",
            via: S,
            method: "POST",
            path: "/api/admin/login",
            op: "POST /api/admin/login",
            body: { username, password: "a password of the test" },
            status: 200,
        });
        await check(proxies, {
            name: "admin login, wrong password",
            via: S,
            method: "POST",
            path: "/api/admin/login",
            op: "POST /api/admin/login",
            body: { username, password: "not the password" },
            status: 401,
            code: "UNAUTHORIZED",
        });
        await check(proxies, {
            name: "admin login, a name no admin can have",
            via: L,
            method: "POST",
            path: "/api/admin/login",
            op: "POST /api/admin/login",
            body: { username: "no spaces allowed", password: "x" },
            status: 400,
            code: "BAD_REQUEST",
        });
    }

    // Logging out, and bans.
    {
        const out = user(90);
        const banned = user(91);
        await check(proxies, {
            name: "logout, bad body",
            via: L,
            method: "POST",
            path: "/api/auth/logout",
            op: "POST /api/auth/logout",
            token: out,
            body: { all: "yes" },
            status: 400,
            code: "BAD_REQUEST",
        });
        await check(proxies, {
            name: "logout",
            via: S,
            method: "POST",
            path: "/api/auth/logout",
            op: "POST /api/auth/logout",
            token: out,
            status: 204,
        });
        await check(proxies, {
            name: "logout, logged out already",
            via: S,
            method: "POST",
            path: "/api/auth/logout",
            op: "POST /api/auth/logout",
            token: out,
            body: { all: true },
            status: 401,
            code: "UNAUTHORIZED",
        });
        const banPath = `/api/admin/users/${base + 91}/ban`;
        await check(proxies, {
            name: "ban, a user's token",
            via: S,
            method: "POST",
            path: banPath,
            op: "POST /api/admin/users/{id}/ban",
            token: banned,
            status: 403,
            code: "FORBIDDEN",
        });
        await check(proxies, {
            name: "ban",
            via: S,
            method: "POST",
            path: banPath,
            op: "POST /api/admin/users/{id}/ban",
            token: admin,
            status: 204,
        });
        await check(proxies, {
            name: "orders of a banned buyer",
            via: S,
            method: "GET",
            path: "/api/orders",
            op: "GET /api/orders",
            token: banned,
            status: 403,
            code: "FORBIDDEN",
        });
        await check(proxies, {
            name: "unban, no token",
            via: L,
            method: "DELETE",
            path: banPath,
            op: "DELETE /api/admin/users/{id}/ban",
            status: 401,
            code: "UNAUTHORIZED",
        });
        await check(proxies, {
            name: "unban",
            via: S,
            method: "DELETE",
            path: banPath,
            op: "DELETE /api/admin/users/{id}/ban",
            token: admin,
            status: 204,
        });
    }

    // OPTIONS on every path: a plain one, and CORS preflights.
    const { doc } = specOperations();
    for (const p of Object.keys(doc.paths)) {
        const concrete = p.replace("{id}", onSale).replace("{file}", "app.css");
        await check(proxies, {
            name: `OPTIONS ${p}`,
            via: S,
            method: "OPTIONS",
            path: concrete,
            op: `OPTIONS ${p}`,
            status: 204,
        });
    }
    await check(proxies, {
        name: "preflight from a listed origin",
        via: S,
        method: "OPTIONS",
        path: `/api/vouchers/${onSale}/seckill`,
        op: "OPTIONS /api/vouchers/{id}/seckill",
        headers: {
            Origin: ALLOWED_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
        status: 204,
    });
    await check(proxies, {
        name: "preflight from another origin",
        via: S,
        method: "OPTIONS",
        path: "/api/vouchers",
        op: "OPTIONS /api/vouchers",
        headers: { Origin: "http://evil.example", "Access-Control-Request-Method": "POST" },
        status: 403,
        code: "FORBIDDEN",
    });
    await check(proxies, {
        name: "a CORS request",
        via: S,
        method: "GET",
        path: `/api/vouchers/${onSale}`,
        op: "GET /api/vouchers/{id}",
        headers: { Origin: ALLOWED_ORIGIN },
        status: 200,
    });
}

// A copy of the document with two answers described wrongly: the probe's
// status is not "ok", and a seckill voucher's stock is a string.
function brokenSpec() {
    const doc = JSON.parse(readFileSync(path.join(ROOT, "docs/openapi.json"), "utf8"));
    doc.components.schemas.Status.properties.status = { const: "fine" };
    doc.components.schemas.SeckillVoucher.properties.stock = { type: "string" };
    const file = path.join(LOG_DIR, "openapi-canary.json");
    writeFileSync(file, JSON.stringify(doc));
    return file;
}

async function main() {
    try {
        return await run();
    } finally {
        await stopAll();
    }
}

async function run() {
    const env = { SECKILL_CORS_ORIGINS: ALLOWED_ORIGIN, SECKILL_DEV: "1", SECKILL_PAY_SECRET: PAY_SECRET };
    const main = await startSeckilld("openapi-seckilld", env);
    // quick: short pay deadlines, and a proof of work before a code.
    // Its codes go to +852 numbers only, one a minute: the SMS budget.
    const quick = await startSeckilld("openapi-seckilld-quick", {
        ...env,
        SECKILL_PAY_TIMEOUT_S: "1",
        SECKILL_POW_MAXNUMBER: "2000",
        SECKILL_SMS_REGIONS: "852",
        SECKILL_SMS_PER_MIN: "1",
    });
    const dead = await freePort();
    const db = new URL(process.env.SECKILL_REDIS_URL).pathname.slice(1) || "0";
    const broken = await startSeckilld("openapi-seckilld-no-redis", {
        ...env,
        SECKILL_REDIS_URL: `redis://127.0.0.1:${dead}/${db}`,
    });
    const router = await startRouter(main.port, { broken: broken.port, quick: quick.port });
    const upstream = `http://127.0.0.1:${router.address().port}`;
    const [strict, lenient, canary] = await Promise.all([
        startPrism("prism-strict", SPEC, upstream, true),
        startPrism("prism-lenient", SPEC, upstream, false),
        startPrism("prism-canary", brokenSpec(), upstream, true),
    ]);
    const proxies = { strict, lenient, direct: main.url };

    try {
        await test("openapi: live traffic matches docs/openapi.yaml", async () => {
            let stopped = null;
            try {
                await runCases(proxies, redis, main);
            } catch (e) {
                stopped = `the cases stopped: ${e.stack || e}`;
            }
            const all = stopped ? [...failures, stopped] : failures;
            if (all.length) throw new Error(`${failures.length} of ${sent} answers failed:\n    ${all.join("\n    ")}`);
        });
        await test("openapi: every operation and every reachable error code was checked", async () => {
            const { ops, codes } = specOperations();
            const missingOps = ops.filter((o) => !seen.operations.has(o));
            const missingCodes = codes.filter((c) => !seen.codes.has(c) && !UNREACHABLE_CODES.has(c));
            assert(!missingOps.length, `not exercised: ${missingOps.join(", ")}`);
            assert(!missingCodes.length, `error codes never seen: ${missingCodes.join(", ")}`);
            console.log(
                `     ${sent} requests through the validating proxies, ${ops.length} operations, ` +
                    `${seen.codes.size} of ${codes.length} error codes`,
            );
        });
        await test("openapi: the proxy catches answers that deviate (a broken copy of the document)", async () => {
            const a = await call(canary, "GET", "/healthz");
            assert(a.status === 500 && /response/.test(a.text), `the probe passed a wrong schema: ${a.status} ${a.text.slice(0, 200)}`);
            const id = await createVoucher(main.url, {
                shopId: 1,
                type: "seckill",
                stock: 5,
                beginTime: timeIn(-60),
                endTime: timeIn(3600),
            });
            const b = await call(canary, "GET", `/api/vouchers/${id}`);
            assert(
                b.status === 500 && /stock/.test(b.text),
                `a voucher passed a wrong schema: ${b.status} ${b.text.slice(0, 200)}`,
            );
        });
    } finally {
        router.close();
    }
    return summary("openapi");
}

process.exitCode = await main();
