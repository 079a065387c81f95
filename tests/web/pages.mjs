// pages.mjs - what the tests that drive the pages in Chromium share:
// starting Debian's Chromium through playwright-core, pages that record
// their console errors, and waiting for a page to show something.

import { chromium } from "playwright-core";

import { assert } from "./lib.mjs";

// A bound for a page to show what a test waits for; reaching it fails
// the test, it is not a measurement.
export const WAIT_MS = 20000;
export const PHONE = { width: 390, height: 844 };
export const DESKTOP = { width: 1280, height: 900 };

// Headless Chromium (CHROMIUM, else /usr/bin/chromium) on a fresh
// temporary profile of its own, removed on close.
export function launchChromium() {
    return chromium.launch({
        executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
        headless: true,
        args: [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    });
}

// Poll fn until it returns a truthy value; fail after ms.
export async function waitFor(fn, what, ms = WAIT_MS) {
    const deadline = Date.now() + ms;
    let last;
    while (Date.now() < deadline) {
        try {
            last = await fn();
            if (last) return last;
        } catch (e) {
            last = e;
        }
        await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

// A page that records console errors, uncaught exceptions and CSP
// violations in page.problems.
export async function newPage(context) {
    const page = await context.newPage();
    page.problems = [];
    page.on("console", (m) => {
        // Chromium logs every 4xx answer of fetch(); the pages expect
        // those (sold out, already purchased) and show them in words.
        if (m.type() === "error" && !/^Failed to load resource: .* status of 4\d\d/.test(m.text()))
            page.problems.push("console: " + m.text());
    });
    page.on("pageerror", (e) => page.problems.push("exception: " + e.message));
    await page.addInitScript(() => {
        document.addEventListener("securitypolicyviolation", (e) =>
            console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`),
        );
    });
    return page;
}

export function assertNoProblems(page) {
    assert(!page.problems.length, `the page reported problems:\n  ${page.problems.join("\n  ")}`);
}
