// lib.mjs - what the browser and OpenAPI tests share: start the real
// seckilld (and other servers) on free loopback ports and stop them,
// mint tokens with the binary's own subcommand, plain HTTP calls, Redis
// commands, and a small test runner that prints one line per check.
//
// The backends come from the environment of scripts/services.sh
// (.run/env.test, sourced by tests/web/run.sh); SECKILL_BIN names the
// binary (build/seckilld). Every child is started by this process and
// stopped by its pid, also when a test fails.

import { execFileSync, spawn } from "node:child_process";
import { createWriteStream, mkdirSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const BIN = path.resolve(ROOT, process.env.SECKILL_BIN || "build/seckilld");
export const LOG_DIR = path.join(ROOT, "build/web");
mkdirSync(LOG_DIR, { recursive: true });

const children = new Set();

// Stop every child still running (SIGTERM, then SIGKILL after 5 s).
export async function stopAll() {
    await Promise.all([...children].map((c) => stop(c)));
}

// Children must not outlive a crash of this process.
process.on("exit", () => {
    for (const c of children) c.proc.kill("SIGKILL");
});

for (const sig of ["SIGINT", "SIGTERM"])
    process.on(sig, async () => {
        await stopAll();
        process.exit(130);
    });

export function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}

// A loopback port that was free a moment ago.
export function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.on("error", reject);
        srv.listen(0, "127.0.0.1", () => {
            const { port } = srv.address();
            srv.close(() => resolve(port));
        });
    });
}

// Start a child process with its output in build/web/<tag>.log (and in
// child.output). Returns {proc, tag, log, output, exited} where exited
// resolves with the exit code.
export function start(tag, cmd, args, env = {}) {
    const log = path.join(LOG_DIR, `${tag}.log`);
    const out = createWriteStream(log);
    const proc = spawn(cmd, args, {
        cwd: ROOT,
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"],
    });
    const child = { proc, tag, log, output: "", code: null };
    for (const stream of [proc.stdout, proc.stderr])
        stream.on("data", (d) => {
            out.write(d);
            if (child.output.length < 1 << 20) child.output += d;
        });
    child.exited = new Promise((resolve) => {
        proc.on("exit", (code, signal) => {
            child.code = code ?? signal;
            children.delete(child);
            resolve(child.code);
        });
    });
    children.add(child);
    return child;
}

export async function stop(child) {
    if (!child || child.code !== null) return;
    child.proc.kill("SIGTERM");
    const timer = setTimeout(() => child.proc.kill("SIGKILL"), 5000);
    await child.exited;
    clearTimeout(timer);
}

// Wait until url answers 200, or the child exits, or timeoutMs passes.
export async function waitReady(child, url, timeoutMs = 15000) {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
        if (child.code !== null) throw new Error(`${child.tag} exited (${child.code}); see ${child.log}`);
        try {
            const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
            await r.arrayBuffer();
            if (r.status === 200) return;
        } catch {
            // not listening yet
        }
        await sleep(100);
    }
    throw new Error(`${child.tag} did not answer ${url} within ${timeoutMs} ms; see ${child.log}`);
}

// Start seckilld on a free port with env added to the current one.
// Returns {child, port, url}.
export async function startSeckilld(tag, env = {}) {
    const port = await freePort();
    const child = start(tag, BIN, ["--port", String(port)], env);
    const url = `http://127.0.0.1:${port}`;
    await waitReady(child, url + "/healthz");
    return { child, port, url };
}

// A token signed with SECKILL_SECRET, by `seckilld token`.
export function token(userId, admin = false) {
    const args = ["token", "--user", String(userId)];
    if (admin) args.push("--admin");
    return execFileSync(BIN, args, { encoding: "utf8" }).trim();
}

// One redis-cli command on the tests' Redis database (SECKILL_REDIS_URL);
// its output as text.
export function redis(...args) {
    const url = new URL(process.env.SECKILL_REDIS_URL);
    const db = url.pathname.slice(1) || "0";
    return execFileSync("redis-cli", ["-h", url.hostname, "-p", url.port || "6379", "-n", db, ...args], {
        encoding: "utf8",
    });
}

// One SQL statement on the tests' database (SECKILL_MYSQL_URL), by the
// mariadb client: its rows as text, tab-separated, without the header.
export function mysql(query) {
    const url = new URL(process.env.SECKILL_MYSQL_URL);
    return execFileSync(
        "mariadb",
        [
            "-h",
            url.hostname,
            "-P",
            url.port || "3306",
            "-u",
            decodeURIComponent(url.username),
            `-p${decodeURIComponent(url.password)}`,
            "-N",
            "-B",
            "-e",
            query,
            url.pathname.slice(1),
        ],
        { encoding: "utf8" },
    );
}

// The first column of the first row of query, as text ("" when none).
export function sql(query) {
    return mysql(query).split("\n")[0].split("\t")[0];
}

// An admin account, by `seckilld admin add` (the password on its
// standard input, in the database of SECKILL_MYSQL_URL).
export function adminAdd(username, password) {
    execFileSync(BIN, ["admin", "add", "--username", username], { input: password + "\n", encoding: "utf8" });
}

// count user tokens from first on, by `seckilld tokens`: [{userId, token}].
export function tokens(first, count) {
    const csv = execFileSync(BIN, ["tokens", "--first", String(first), "--count", String(count)], {
        encoding: "utf8",
    });
    return csv
        .trim()
        .split("\n")
        .slice(1)
        .map((line) => {
            const [userId, tok] = line.split(",");
            return { userId, token: tok };
        });
}

// A number unique to this run, for user ids, shops and phones.
export const RUN = Date.now() % 1e9;

// An RFC 3339 UTC time offsetS seconds from now.
export function timeIn(offsetS) {
    return new Date(Math.floor(Date.now() / 1000 + offsetS) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

// One HTTP call: resolves to {status, headers, text, json}.
export async function http(base, method, p, { body, token: tok, headers = {} } = {}) {
    const h = { ...headers };
    if (tok) h.Authorization = "Bearer " + tok;
    if (body !== undefined && !h["Content-Type"]) h["Content-Type"] = "application/json";
    const r = await fetch(base + p, {
        method,
        headers: h,
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
        signal: AbortSignal.timeout(30000),
    });
    const text = await r.text();
    let json = null;
    try {
        json = JSON.parse(text);
    } catch {
        json = null;
    }
    return { status: r.status, headers: r.headers, text, json };
}

// Create a voucher as an admin through base; returns its id. One whose
// endTime has passed (which creation refuses) is made ending in an hour
// and stopped at once: it ends now.
export async function createVoucher(base, fields) {
    const body = {
        shopId: 1,
        title: "test voucher",
        payValue: 4750,
        actualValue: 5000,
        ...fields,
    };
    const over = body.endTime && Date.parse(body.endTime) <= Date.now();
    if (over) body.endTime = new Date(Date.now() + 3600 * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
    const r = await http(base, "POST", "/api/vouchers", { body, token: token(1, true) });
    if (r.status !== 201) throw new Error(`POST /api/vouchers: ${r.status} ${r.text}`);
    if (over) {
        const s = await http(base, "POST", `/api/vouchers/${r.json.id}/stop`, { token: token(1, true) });
        if (s.status !== 200) throw new Error(`POST /api/vouchers/${r.json.id}/stop: ${s.status} ${s.text}`);
    }
    return r.json.id;
}

// ---- a small test runner ----

const results = [];
// SECKILL_WEB_ONLY=text runs only the tests whose names contain text
// (one test while working on it, without the whole file).
const ONLY = process.env.SECKILL_WEB_ONLY || "";

// Run the checks of fn as one named test; failures are recorded and the
// run goes on with the next test.
export async function test(name, fn) {
    if (!name.includes(ONLY)) return;
    const t0 = Date.now();
    try {
        await fn();
        results.push({ name, ok: true });
        console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    } catch (e) {
        results.push({ name, ok: false });
        console.log(`FAIL ${name}: ${e.stack || e}`);
    }
}

export function assert(cond, msg) {
    if (!cond) throw new Error(msg);
}

export function assertEqual(got, want, what) {
    if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

// Print the totals in tests/run.sh's words and return the exit status.
export function summary(label) {
    const failed = results.filter((r) => !r.ok).length;
    console.log(`${label}: ${results.length - failed} passed, ${failed} failed`);
    return failed || !results.length ? 1 : 0;
}
