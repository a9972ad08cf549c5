// The lab's in-page measurement, inlined at the top of every lab page's <head>, right
// after `window.__labConfig = {css, hero, api, bulk, paints}` (the page's stylesheet and
// hero image paths or null, its API answers' paths, the paths of the background downloads
// whose end it measures, and whether it measures paint timings).
//
// Invariants:
// - `window.__lab` is `{done: false}` from the first script on, and is replaced exactly
//   once by the report with `done: true`; a failure anywhere lands in `report.errors`
//   and never keeps the report from being published.
// - Every resource in `report.resources` was hashed from bytes the page received: the
//   page's own fetches (`window.__labPage.fetch`) from the bytes it read, the elements'
//   resources (document, stylesheet, font, images, scripts) by reading them again after
//   `load` from the HTTP cache (`cache: 'only-if-cached'`, which never goes to the
//   network); a resource that cannot be read back is an error, never skipped.
// - Times are milliseconds since the navigation started (`performance.timeOrigin`).
//
// When inlined, comment lines and indentation are removed: keep comments on lines of
// their own and no multi-line string literals.
(() => {
  'use strict';
  // Time after the page's work ends for Chromium to report the last Largest Contentful
  // Paint candidate, which it does at the paint after the element's: a few frames.
  const SETTLE_MS = 100;
  // Longest wait for the Resource Timing entries of the paths the figures need: a fetch's
  // body can be read to its end a task before Chromium adds its entry (in CI the demo's
  // second download, which ends last, had none yet).
  const ENTRY_WAIT_MS = 1000;
  const config = window.__labConfig || {};
  const errors = [];
  const fetched = [];
  const tracked = [];
  const progress = {};
  const paints = {fcp: null, lcp: null, lcpUrl: null};
  let hidden = document.visibilityState === 'hidden';
  window.__lab = {done: false};

  const pathOf = (url) => new URL(url, location.href).pathname;
  const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
  const sha256 = async (bytes) => hex(await crypto.subtle.digest('SHA-256', bytes));
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  // The first Resource Timing entry of `path` (entries are in start order): its original
  // load, not a later read from the cache.
  const firstEntry = (path) => performance.getEntriesByName(new URL(path, location.href).href)[0];
  const protocolOf = (path) => (firstEntry(path) || {}).nextHopProtocol || '';

  function observe(type, onEntry) {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(onEntry)).observe({type, buffered: true});
    } catch (error) {
      errors.push(`observing ${type}: ${error}`);
    }
  }

  observe('paint', (entry) => {
    if (entry.name === 'first-contentful-paint') paints.fcp = entry.startTime;
  });
  // Each new entry is a larger element than the last: the last one is the LCP.
  observe('largest-contentful-paint', (entry) => {
    paints.lcp = entry.startTime;
    paints.lcpUrl = entry.url ? pathOf(entry.url) : null;
  });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'hidden') hidden = true;
  });
  // Capture phase: resource load errors of elements do not bubble.
  window.addEventListener('error', (event) => {
    const target = event.target;
    if (target && target !== window) {
      errors.push(`failed to load ${target.currentSrc || target.src || target.href}`);
    } else {
      errors.push(`script error: ${event.message} (${event.filename}:${event.lineno})`);
    }
  }, true);
  window.addEventListener('unhandledrejection', (event) => errors.push(`unhandled rejection: ${event.reason}`));

  // Reads `response`'s body to its end, publishing the bytes received so far in
  // `progress[path]` (the driver watches it), and returns the bytes.
  async function readCounting(response, path) {
    const reader = response.body.getReader();
    const chunks = [];
    let received = 0;
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.length;
      progress[path] = received;
    }
    const bytes = new Uint8Array(received);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    return bytes;
  }

  // GET `path` and record its length and hash; the bytes, or null after recording an
  // error (a failed fetch or a status other than 200).
  async function fetchAndHash(path, init) {
    try {
      const response = await fetch(path, init);
      if (response.status !== 200) {
        errors.push(`GET ${path}: status ${response.status}`);
        await response.arrayBuffer();
        return null;
      }
      const bytes = await readCounting(response, path);
      fetched.push({path, len: bytes.length, sha256: await sha256(bytes)});
      return bytes;
    } catch (error) {
      errors.push(`GET ${path}: ${error}`);
      return null;
    }
  }

  // Makes the report wait for `promise`; a rejection becomes an error.
  function track(promise) {
    tracked.push(Promise.resolve(promise).catch((error) => errors.push(`page script: ${error}`)));
    return promise;
  }

  window.__labPage = {
    fetch: (path, init) => track(fetchAndHash(path, init)),
    track,
    progress,
  };

  // Reads `path` back from the HTTP cache and hashes it; null after recording an error.
  async function rereadFromCache(path) {
    try {
      const response = await fetch(path, {cache: 'only-if-cached', mode: 'same-origin'});
      if (response.status !== 200) {
        errors.push(`reading ${path} from the cache: status ${response.status}`);
        return null;
      }
      const bytes = await response.arrayBuffer();
      return {path, len: bytes.byteLength, sha256: await sha256(bytes), protocol: protocolOf(path)};
    } catch (error) {
      errors.push(`reading ${path} from the cache: ${error}`);
      return null;
    }
  }

  // The document and every resource its elements loaded (everything but fetch() calls,
  // which `fetchAndHash` recorded).
  function elementPaths() {
    const paths = [location.pathname];
    for (const entry of performance.getEntriesByType('resource')) {
      const path = pathOf(entry.name);
      if (entry.initiatorType !== 'fetch' && !paths.includes(path)) paths.push(path);
    }
    return paths;
  }

  function responseEnd(path) {
    if (!path) return null;
    const entry = firstEntry(path);
    if (!entry) {
      errors.push(`no resource timing entry for ${path}`);
      return null;
    }
    return entry.responseEnd;
  }

  // Per API answer, fetchStart to responseEnd: the whole time the app waited for it,
  // queueing in the browser included (requestStart would leave that out).
  function apiTimes() {
    const times = [];
    for (const path of config.api || []) {
      const entry = firstEntry(path);
      if (entry) times.push(entry.responseEnd - entry.fetchStart);
      else errors.push(`no resource timing entry for ${path}`);
    }
    return times;
  }

  // The later responseEnd of the background downloads (`config.bulk`); null without any.
  function bulkEnd() {
    const ends = (config.bulk || []).map(responseEnd);
    if (ends.length === 0 || ends.includes(null)) return null;
    return Math.max(...ends);
  }

  // Every resource's first load as Resource Timing saw it, in start order: where the time
  // of a slow load went (queued in the browser, waiting for the first byte, or receiving).
  function timings() {
    const seen = new Set();
    const out = [];
    // The document first: its requestStart is when the connection (TCP and TLS) was ready.
    const entries = performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'));
    for (const entry of entries) {
      const path = pathOf(entry.name);
      if (seen.has(path)) continue;
      seen.add(path);
      out.push({path, start_ms: entry.startTime, request_ms: entry.requestStart, first_byte_ms: entry.responseStart, end_ms: entry.responseEnd});
    }
    return out;
  }

  const loaded = new Promise((resolve) => {
    // After the load event's handlers, so that loadEventEnd is set too.
    window.addEventListener('load', () => setTimeout(resolve, 0));
  });

  // Waits for every tracked promise, including those tracked while waiting.
  async function allTracked() {
    let settled = -1;
    while (settled !== tracked.length) {
      settled = tracked.length;
      await Promise.allSettled(tracked.slice());
    }
  }

  function paintFigures() {
    if (config.paints === false) return {};
    if (paints.fcp === null) errors.push('no first-contentful-paint entry');
    if (paints.lcp === null) errors.push('no largest-contentful-paint entry');
    if (hidden) errors.push('the page was hidden during the load: Chromium reports no paint timings for hidden pages');
    return {fcp_ms: paints.fcp, lcp_ms: paints.lcp, lcp_url: paints.lcpUrl};
  }

  // Waits, at most ENTRY_WAIT_MS, until each of `paths` has its Resource Timing entry.
  async function entriesOf(paths) {
    for (let waited = 0; waited < ENTRY_WAIT_MS; waited += 10) {
      if (paths.every((path) => !path || firstEntry(path))) return;
      await sleep(10);
    }
  }

  async function report() {
    await loaded;
    await allTracked();
    await entriesOf([config.css, config.hero].concat(config.api || [], config.bulk || []));
    const navigation = performance.getEntriesByType('navigation')[0];
    const figures = {
      dcl_ms: navigation.domContentLoadedEventStart,
      load_ms: navigation.loadEventStart,
      css_end_ms: responseEnd(config.css),
      hero_end_ms: responseEnd(config.hero),
      api_ms: apiTimes(),
      bulk_end_ms: bulkEnd(),
      timings: timings(),
    };
    const reread = await Promise.all(elementPaths().map(rereadFromCache));
    const own = fetched.map((resource) => ({...resource, protocol: protocolOf(resource.path)}));
    await sleep(SETTLE_MS);
    return {...figures, ...paintFigures(), resources: reread.filter(Boolean).concat(own), errors};
  }

  report()
    .catch((error) => ({errors: errors.concat(`instrumentation: ${error}`)}))
    .then((result) => {
      window.__lab = {...result, done: true};
    });
})();
