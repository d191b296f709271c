/*
 * <ntf-inbox>: a user's in-app inbox as a web component. One file, no build step, no dependency.
 *
 *   <script type="module" src="https://notify.example.com/static/notifications/ntf-inbox.js"></script>
 *   <ntf-inbox api="https://notify.example.com" token="USER_TOKEN"></ntf-inbox>
 *
 * Attributes: api (the platform's address; default this page's), token (a user token from
 * POST /api/v1/inbox/tokens), token-url (optional: a URL of your own site answering {"token"},
 * fetched when the token expires or is revoked), page-size (default 20).
 * It shows a bell with the unread count, the list (mark read, archive, mark all read) and follows
 * GET /api/v1/inbox/stream with EventSource, opened with a one-use ticket (POST
 * /api/v1/inbox/stream/tickets, so no token is ever in a URL) and the id of the last event it got:
 * after a drop, a refusal or a new token it reopens where it left off, with a new ticket (a
 * refused token is renewed first) and a backoff. A `reset` event (it was away longer than the
 * server keeps events) reloads the list.
 * Styles are a constructed stylesheet (no inline style, so a strict Content-Security-Policy holds);
 * every text from the API is set as text, never as HTML.
 */

const CSS = `
:host { position: relative; display: inline-block; font: 14px/1.4 system-ui, sans-serif; color: #1f2328; }
button { font: inherit; cursor: pointer; }
.bell { position: relative; display: inline-flex; border: 1px solid #d0d7de; background: #fff; color: #57606a;
  border-radius: 6px; padding: 6px 8px; }
.badge { position: absolute; top: -8px; right: -8px; min-width: 18px; padding: 0 5px; border-radius: 9px;
  background: #cf222e; color: #fff; font-size: 12px; line-height: 18px; text-align: center; }
.badge[hidden] { display: none; }
.panel { position: absolute; right: 0; z-index: 1000; width: 360px; max-height: 480px; overflow: auto; margin-top: 6px;
  background: #fff; border: 1px solid #d0d7de; border-radius: 8px; box-shadow: 0 8px 24px rgba(0,0,0,.12); }
.panel[hidden] { display: none; }
.head { display: flex; justify-content: space-between; align-items: center; padding: 8px 12px; border-bottom: 1px solid #eaeef2; }
.state { color: #57606a; font-size: 12px; }
ul { list-style: none; margin: 0; padding: 0; }
li { padding: 10px 12px; border-bottom: 1px solid #eaeef2; }
li.unread { background: #f6f8fa; }
li.unread .title::before { content: "\\25CF  "; color: #0969da; }
.title { font-weight: 600; }
.body { margin: 2px 0 6px; white-space: pre-wrap; }
.meta { display: flex; gap: 8px; align-items: center; font-size: 12px; color: #57606a; }
.meta button, .head button { border: none; background: none; color: #0969da; padding: 0; }
.empty { padding: 16px 12px; color: #57606a; }
`;

// A bell drawn as SVG: no icon font or emoji font is needed on the page.
const BELL_PATH = "M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0 5 11v5l-2 2v1h18v-1z";

function bellIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "20");
  svg.setAttribute("height", "20");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", BELL_PATH);
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}

const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30000;

class NtfInbox extends HTMLElement {
  static get observedAttributes() { return ["token"]; }

  constructor() {
    super();
    this.items = new Map();
    this.counts = { unseen: 0, unread: 0, total: 0 };
    this.retryMs = RETRY_MIN_MS;
    const root = this.attachShadow({ mode: "open" });
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(CSS);
    root.adoptedStyleSheets = [sheet];
    this.bell = this.el("button", { class: "bell", part: "bell", "aria-label": "Notifications" }, bellIcon());
    this.badge = this.el("span", { class: "badge", part: "badge", hidden: "" }, "0");
    this.bell.append(this.badge);
    this.panel = this.el("div", { class: "panel", part: "panel", hidden: "" });
    this.state = this.el("span", { class: "state" }, "");
    const markAll = this.el("button", { class: "mark-all" }, "Mark all read");
    markAll.addEventListener("click", () => this.post("/api/v1/inbox/bulk", { action: "read" }));
    this.list = this.el("ul", { part: "list" });
    this.panel.append(this.el("div", { class: "head" }, this.el("strong", {}, "Notifications"), this.state, markAll), this.list);
    this.bell.addEventListener("click", () => this.toggle());
    root.append(this.bell, this.panel);
  }

  el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    for (const child of children) node.append(child);
    return node;
  }

  get api() { return (this.getAttribute("api") || "").replace(/\/$/, ""); }
  get token() { return this.getAttribute("token") || ""; }

  connectedCallback() { this.start(); }
  disconnectedCallback() { this.stop(); }
  attributeChangedCallback(name, before, after) { if (this.isConnected && before !== after && before !== null) this.start(); }

  stop() {
    this.generation = (this.generation || 0) + 1;  // a follow() still fetching its ticket opens nothing
    if (this.source) this.source.close();
    this.source = null;
    clearTimeout(this.retryTimer);
  }

  async start() {
    this.stop();
    if (!this.token) return this.setState("no token");
    // The list is loaded once; after that the stream's events (from lastEventId) keep it current.
    if (this.lastEventId === undefined) await this.load();
    await this.follow();
  }

  setState(text) { this.state.textContent = text; }

  async request(path, options = {}) {
    const response = await fetch(this.api + path, {
      ...options,
      headers: { Authorization: `Bearer ${this.token}`, "Content-Type": "application/json" },
    });
    if (response.status === 401) {
      await this.renewToken();
      throw new Error("token refused");
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.json();
  }

  async post(path, body) {
    try {
      const answer = await this.request(path, { method: "POST", body: body ? JSON.stringify(body) : undefined });
      if (answer.counts) this.setCounts(answer.counts);
      if (answer.id) this.upsert(answer);
    } catch (error) {
      this.setState(String(error.message || error));
    }
  }

  async load() {
    try {
      const size = Number(this.getAttribute("page-size")) || 20;
      const feed = await this.request(`/api/v1/inbox/items?limit=${size}`);
      this.items.clear();
      for (const item of feed.items) this.items.set(item.id, item);
      this.setCounts(feed.counts);
      this.render();
    } catch (error) {
      this.setState(String(error.message || error));
    }
  }

  async follow() {
    const generation = this.generation;
    let ticket;
    try {
      ticket = (await this.request("/api/v1/inbox/stream/tickets", { method: "POST" })).ticket;
    } catch (error) {
      // A refused token was renewed by request(), and the new token restarted the component.
      if (generation === this.generation) this.retry();
      return;
    }
    if (generation !== this.generation) return;
    const resume = this.lastEventId ? `&last_event_id=${encodeURIComponent(this.lastEventId)}` : "";
    const source = new EventSource(`${this.api}/api/v1/inbox/stream?ticket=${encodeURIComponent(ticket)}${resume}`);
    this.source = source;
    const on = (type, handle) => source.addEventListener(type, (event) => {
      if (event.lastEventId) this.lastEventId = event.lastEventId;
      handle(JSON.parse(event.data));
    });
    source.addEventListener("open", () => { this.retryMs = RETRY_MIN_MS; this.setState("live"); });
    on("item.created", (item) => this.upsert(item));
    on("item.updated", (item) => this.upsert(item));
    on("counts", (counts) => {
      this.setCounts(counts);
      if (counts.resync) this.load();
    });
    on("reset", (counts) => { this.setCounts(counts); this.load(); });
    source.addEventListener("error", () => {
      // A ticket opens one stream: EventSource's own reconnect would be refused, so every drop
      // or refusal reopens here, with a new ticket and the last event id, after a backoff.
      source.close();
      this.retry();
    });
  }

  retry() {
    this.setState("reconnecting");
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.start(), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
  }

  async renewToken() {
    const url = this.getAttribute("token-url");
    if (!url) return;
    try {
      const answer = await (await fetch(url, { credentials: "same-origin" })).json();
      if (answer.token && answer.token !== this.token) this.setAttribute("token", answer.token);
    } catch (error) {
      this.setState("token not renewed");
    }
  }

  setCounts(counts) {
    this.counts = { unseen: counts.unseen, unread: counts.unread, total: counts.total };
    this.badge.textContent = String(counts.unread);
    this.badge.toggleAttribute("hidden", !counts.unread);
    this.dispatchEvent(new CustomEvent("ntf-counts", { detail: this.counts }));
  }

  upsert(item) {
    if (item.archived_at) this.items.delete(item.id);
    else this.items.set(item.id, item);
    this.render();
  }

  toggle() {
    const opening = this.panel.hidden;
    this.panel.hidden = !opening;
    if (opening && this.counts.unseen) this.post("/api/v1/inbox/bulk", { action: "seen" });
  }

  render() {
    const items = [...this.items.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    const rows = items.map((item) => this.row(item));
    this.list.replaceChildren(...(rows.length ? rows : [this.el("li", { class: "empty" }, "Nothing yet")]));
  }

  row(item) {
    const li = this.el("li", { class: item.read_at ? "read" : "unread", "data-id": item.id, part: "item" });
    const title = this.el("div", { class: "title" }, item.title || "");
    const body = this.el("div", { class: "body" }, item.body || "");
    const when = this.el("time", { datetime: item.created_at }, new Date(item.created_at).toLocaleString());
    const read = this.el("button", { class: "read-toggle" }, item.read_at ? "Mark unread" : "Mark read");
    read.addEventListener("click", () => this.post(`/api/v1/inbox/items/${item.id}/${item.read_at ? "unread" : "read"}`));
    const archive = this.el("button", { class: "archive" }, "Archive");
    archive.addEventListener("click", () => this.post(`/api/v1/inbox/items/${item.id}/archive`));
    const meta = this.el("div", { class: "meta" }, when, read, archive);
    if (/^https?:\/\//i.test(item.action_url || "")) {
      const open = this.el("a", { href: item.action_url, target: "_blank", rel: "noopener noreferrer" }, "Open");
      open.addEventListener("click", () => this.post(`/api/v1/inbox/items/${item.id}/read`));
      meta.append(open);
    }
    li.append(title, body, meta);
    return li;
  }
}

if (!customElements.get("ntf-inbox")) customElements.define("ntf-inbox", NtfInbox);
