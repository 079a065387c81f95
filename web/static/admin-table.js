// admin-table.js - the admin's tables for the keyboard and for a phone,
// beside what admin.js draws in them: every row of the vouchers' table
// can be reached with Tab and selected with Enter or Space (as a click
// selects it), the selected one marked aria-current; and each cell of a
// table marked "cards" carries its column's name (data-label), which
// app.css shows before the value when, on a phone, each row is a card.

// Rows of body: focusable, and marked current while admin.js has them
// selected (class "selected").
function markRows(body) {
    for (const tr of body.rows) {
        if (!tr.hasAttribute("tabindex")) tr.tabIndex = 0;
        const current = tr.classList.contains("selected");
        if (current && tr.getAttribute("aria-current") !== "true") tr.setAttribute("aria-current", "true");
        else if (!current && tr.hasAttribute("aria-current")) tr.removeAttribute("aria-current");
    }
}

// Name each cell of table with its column's heading. The roles are said
// outright: a table shown as blocks may lose them otherwise.
function labelCells(table) {
    const head = table.tHead.rows[0];
    const heads = [...head.cells].map((th) => th.textContent.trim());
    setRole(table, "table");
    setRole(head, "row");
    for (const th of head.cells) setRole(th, "columnheader");
    for (const body of table.tBodies)
        for (const tr of body.rows) {
            setRole(tr, "row");
            [...tr.cells].forEach((td, i) => {
                setRole(td, "cell");
                if (heads[i] && td.dataset.label !== heads[i]) td.dataset.label = heads[i];
            });
        }
}

function setRole(node, role) {
    if (node.getAttribute("role") !== role) node.setAttribute("role", role);
}

// Keep body's rows selectable by keyboard as admin.js adds and redraws
// them.
export function selectableRows(body) {
    markRows(body);
    new MutationObserver(() => markRows(body)).observe(body, {
        childList: true,
        subtree: true,
        attributes: true,
        attributeFilter: ["class"],
    });
    body.addEventListener("keydown", (ev) => {
        const tr = ev.target.closest("tr");
        if (!tr || ev.target !== tr || (ev.key !== "Enter" && ev.key !== " ")) return;
        ev.preventDefault();
        tr.click();
    });
}

// Keep the cells of table labelled as rows come and go.
export function cardTable(table) {
    labelCells(table);
    new MutationObserver(() => labelCells(table)).observe(table, { childList: true, subtree: true });
}

const vouchers = document.getElementById("voucher-rows");
if (vouchers) selectableRows(vouchers);
for (const table of document.querySelectorAll("table.cards")) cardTable(table);
