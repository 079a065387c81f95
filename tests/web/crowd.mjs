// crowd.mjs - a small crowd that buys one voucher, as a separate process
// (the admin page's test watches the stock fall while it runs).
//
//   node tests/web/crowd.mjs BASE_URL VOUCHER_ID FIRST_USER COUNT [PARALLEL] [PAUSE_MS]
//
// COUNT users (ids FIRST_USER...) each buy once, PARALLEL at a time, each
// buyer pausing PAUSE_MS before its request, so the sale takes a few
// seconds. Prints one line "crowd: N bought, M sold out" and exits 0 when
// every answer was 201 or 409 SOLD_OUT, 1 otherwise.

import { http, sleep, tokens } from "./lib.mjs";

const [base, voucher, first, count, parallel = "4", pause = "100"] = process.argv.slice(2);
if (!base || !voucher || !first || !count) {
    console.error("usage: crowd.mjs BASE_URL VOUCHER_ID FIRST_USER COUNT [PARALLEL] [PAUSE_MS]");
    process.exit(2);
}

const buyers = tokens(Number(first), Number(count));
const outcomes = {};
let next = 0;

async function worker() {
    while (next < buyers.length) {
        const b = buyers[next++];
        await sleep(Number(pause));
        const r = await http(base, "POST", `/api/vouchers/${voucher}/seckill`, { token: b.token });
        const key = r.status === 201 ? "bought" : `${r.status} ${(r.json && r.json.error && r.json.error.code) || ""}`;
        outcomes[key] = (outcomes[key] || 0) + 1;
    }
}

await Promise.all(Array.from({ length: Number(parallel) }, worker));
const bought = outcomes.bought || 0;
const soldOut = outcomes["409 SOLD_OUT"] || 0;
const other = Object.entries(outcomes).filter(([k]) => k !== "bought" && k !== "409 SOLD_OUT");
console.log(`crowd: ${bought} bought, ${soldOut} sold out${other.length ? ", other: " + JSON.stringify(Object.fromEntries(other)) : ""}`);
process.exit(other.length ? 1 : 0);
