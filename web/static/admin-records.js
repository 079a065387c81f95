// admin-records.js - the admin page's records: the payments to give back
// (GET /api/refunds, each marked done with POST /api/refunds/{id}/done
// once the money went back) and the audit log of what admins did
// (GET /api/audit), a page at a time, newest first. admin.js owns the
// session: it starts this with a way to read the token and to learn that
// a call was refused for it.

import { call, change, describeError, el, localTime, money, say } from "./api.js";

const REFRESH_MS = 10000;
const PAGE = 20;

const $ = (id) => document.getElementById(id);

const REASONS = {
    late: "paid after the deadline",
    closed: "paid for a closed order",
    second_payment: "paid twice",
};

let session = { token: () => null, gone: () => false };

// A list read a page at a time: the rows shown and the next page's cursor.
function pager(path, render, msg, more) {
    const p = { items: [], next: null, busy: false };
    // The first page again (replace), or the next one (append).
    p.load = async (append = false) => {
        const tok = session.token();
        if (!tok) {
            p.items = [];
            p.next = null;
            render(p.items);
            $(more).hidden = true;
            say($(msg), "Log in to see them.", "warn");
            return;
        }
        if (p.busy) return;
        p.busy = true;
        const base = path();
        const cursor = append && p.next ? `&cursor=${encodeURIComponent(p.next)}` : "";
        const res = await call("GET", `${base}${base.includes("?") ? "&" : "?"}limit=${PAGE}${cursor}`, { token: tok });
        p.busy = false;
        if (session.gone(res, tok) || session.token() !== tok) return;
        if (!res.ok) {
            say($(msg), "Could not read them: " + describeError(res).text, "warn");
            return;
        }
        p.items = append ? p.items.concat(res.data.items) : res.data.items;
        p.next = res.data.nextCursor;
        render(p.items);
        $(more).hidden = !p.next;
        say($(msg), p.items.length ? "" : "None.");
    };
    return p;
}

// ---- refunds ----

const refunds = pager(
    () => `/api/refunds?status=${encodeURIComponent($("refund-status").value)}`,
    renderRefunds,
    "refund-msg",
    "refund-more",
);

function renderRefunds(items) {
    $("refund-rows").replaceChildren(
        ...items.map((r) =>
            el(
                "tr",
                { "data-refund-id": r.id },
                el("td", { class: "num" }, r.id),
                el("td", { class: "num" }, r.orderId),
                el("td", {}, r.txnId),
                el("td", { class: "num" }, money(r.amount)),
                el("td", {}, REASONS[r.reason] || r.reason),
                el("td", {}, localTime(r.createTime)),
                el(
                    "td",
                    { class: "status" },
                    r.status === "done"
                        ? `refunded ${localTime(r.doneTime)}`
                        : el(
                              "button",
                              {
                                  type: "button",
                                  class: "secondary",
                                  "aria-label": `Mark refunded: refund ${r.id} of order ${r.orderId}`,
                                  onclick: (ev) => markDone(r, ev.currentTarget),
                              },
                              "Mark refunded",
                          ),
                ),
            ),
        ),
    );
}

// Record that r's money went back, after the admin confirms: it cannot
// be undone.
async function markDone(r, button) {
    if (!window.confirm(`Record that ${money(r.amount)} for order ${r.orderId} (transaction ${r.txnId}) went back to the buyer? This cannot be undone.`))
        return;
    const tok = session.token();
    button.disabled = true;
    const res = await change("POST", `/api/refunds/${r.id}/done`, { token: tok });
    if (session.gone(res, tok, true)) return;
    if (!res.ok) {
        button.disabled = false;
        say($("refund-msg"), `Refund ${r.id} not recorded: ${describeError(res).text}`, "bad");
        return;
    }
    // The message after the list's own ("None." when it is empty), and
    // before the audit log's read, so that it is there when the row goes.
    await refunds.load();
    say($("refund-msg"), `Refund ${r.id} recorded as done.`, "ok");
    await audit.load();
}

// ---- the audit log ----

const audit = pager(() => "/api/audit", renderAudit, "audit-msg", "audit-more");

// A record's change as short text: "title: Spring sale, stock: 100".
function changeText(change) {
    if (!change) return "";
    return Object.entries(change)
        .map(([k, v]) => `${k}: ${typeof v === "object" && v !== null ? JSON.stringify(v) : v}`)
        .join(", ");
}

function renderAudit(items) {
    $("audit-rows").replaceChildren(
        ...items.map((a) =>
            el(
                "tr",
                { "data-audit-id": a.id },
                el("td", {}, localTime(a.time)),
                el("td", {}, a.admin ? a.admin.username : "–"),
                el("td", {}, a.address || "–"),
                el("td", { class: "action" }, a.action),
                el("td", {}, a.target.id ? `${a.target.type} ${a.target.id}` : a.target.type),
                el("td", { class: "title" }, changeText(a.change)),
            ),
        ),
    );
}

// Start: token() is the session's token or null; gone(res, token,
// moveFocus) is true when res was a 401 that ended the session.
export function initRecords(token, gone) {
    session = { token, gone };
    $("refund-status").addEventListener("change", () => refunds.load());
    $("refund-more").addEventListener("click", () => refunds.load(true));
    $("audit-more").addEventListener("click", () => audit.load(true));
    $("records-refresh").addEventListener("click", () => reloadRecords());
    // The first pages again now and then (not the pages read further).
    setInterval(() => {
        if (document.visibilityState !== "visible") return;
        if (!refunds.next || refunds.items.length <= PAGE) refunds.load();
        if (!audit.next || audit.items.length <= PAGE) audit.load();
    }, REFRESH_MS);
    reloadRecords();
}

// Read both lists again from their first page (after a login or logout).
export function reloadRecords() {
    refunds.load();
    audit.load();
}
