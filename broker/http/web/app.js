// kgroupd's live page: every group from /api/groups, kept up to date from /api/events
// (server-sent events: group, rebalance, commits) and a refresh every few seconds (lag also
// moves when producers write, which no group event tells). Plain JS, no build step.
"use strict";

const groups = new Map(); // group id -> /api/groups/{id} view
const lastMoves = new Map(); // group id -> {generation, partitions: Set("topic-p")}
const timeline = []; // rebalance events, newest first
const seen = new Set(); // rebalance event keys already on the timeline
const TIMELINE_MAX = 30;
let refreshTimer = null;
let loaded = false; // the first /api/groups answer has come
let loadProblem = null; // why it has not, when asking failed

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A member id is long (a client id and a UUID; a consumer group's: 22 characters): a member
// without a client id or instance id is named by the start of it (the whole one is its title).
function shortId(memberId) {
  const id = (memberId || "").replace(/^-+/, "");
  return id.length > 9 ? `${id.slice(0, 8)}…` : id;
}

function who(member) {
  if (!member) return "—";
  return member.client_id || member.instance_id || shortId(member.member_id);
}

// Lag bars share one scale across the page (a lag of 4 is not drawn as long as one of 1,437),
// logarithmic so that a small lag still shows; the number is beside it.
function barWidth(lag, maxLag) {
  if (!lag || maxLag <= 0) return 0;
  return Math.max(2, Math.round(100 * Math.log10(1 + lag) / Math.log10(1 + maxLag)));
}

function when(ts) {
  return new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
}

function renderGroup(view, maxLag) {
  const moved = lastMoves.get(view.group);
  const movedNow = moved && moved.generation === view.generation ? moved.partitions : new Set();
  const byId = new Map(view.members.map((m) => [m.member_id, m]));
  // narrow screens show the members' table as a list (style.css): data-label names each cell
  const members = el("table", { class: "members stack" },
    el("thead", {}, el("tr", {}, el("th", {}, "member"), el("th", {}, "host"),
      el("th", {}, "instance id"), el("th", {}, "partitions"))),
    el("tbody", {}, view.members.length ? view.members.map((m) => el("tr", { "data-member": m.client_id, "data-member-id": m.member_id },
      el("td", { class: "mono who", title: m.member_id }, who(m)),
      el("td", { class: "mono", "data-label": "host" }, m.host),
      el("td", { class: "mono", "data-label": "instance id" }, m.instance_id || "—"),
      el("td", { class: "parts" }, m.partitions.length ? m.partitions.map((p) => {
        const key = `${p.topic}-${p.partition}`;
        return el("span", { class: movedNow.has(key) ? "chip moved" : "chip" }, key);
      }) : el("span", { class: "muted" }, "no partitions"))))
      : el("tr", {}, el("td", { class: "muted", colspan: 4 }, "no members"))));
  const offsets = view.type === "share" ? renderSharePartitions(view, maxLag) : el("table", { class: "offsets" },
    el("thead", {}, el("tr", {}, el("th", {}, "partition"), el("th", { class: "owner" }, "owner"),
      el("th", { class: "num" }, "committed"), el("th", { class: "num" }, "log end"),
      el("th", { class: "num" }, "lag"),
      el("th", { class: "bar", title: "lag on a logarithmic scale shared by every group on the page" }, "log scale"))),
    el("tbody", {}, view.offsets.map((r) => {
      const key = `${r.topic}-${r.partition}`;
      const lag = r.lag === null ? "—" : r.lag;
      const owner = r.member_id ? who(byId.get(r.member_id) || r) : "—";
      return el("tr", { "data-partition": key, "data-lag": r.lag, class: movedNow.has(key) ? "moved" : null },
        el("td", { class: "mono" }, key),
        el("td", { class: "mono owner", title: r.member_id }, owner),
        el("td", { class: "num" }, r.committed === null ? "—" : r.committed),
        el("td", { class: "num" }, r.log_end === null ? "—" : r.log_end),
        el("td", { class: r.lag ? "num lag" : "num" }, lag),
        el("td", { class: "bar", title: r.lag ? `lag ${r.lag}` : null },
          el("span", { style: `width:${barWidth(r.lag, maxLag)}%` })));
    })));
  return el("article", { class: "group", "data-group": view.group, "data-generation": view.generation, "data-state": view.state },
    el("h2", {}, view.group, " ",
      el("span", { class: `state state-${view.state}` }, view.state)),
    el("dl", {},
      el("div", {}, el("dt", {}, "generation"), el("dd", { class: "generation" }, view.generation)),
      el("div", {}, el("dt", {}, "protocol"), el("dd", {}, `${view.type} · ${view.protocol_type || "—"} / ${view.protocol || "—"}`)),
      el("div", {}, el("dt", {}, "members"), el("dd", {}, view.members.length)),
      el("div", {}, el("dt", {}, "lag"), el("dd", { class: "total-lag" }, view.lag))),
    el("div", { class: "columns" }, members, offsets),
    movedNow.size ? el("p", { class: "legend" }, el("span", { class: "chip moved" }, "highlighted"),
      ` moved in the rebalance to generation ${view.generation}`) : null);
}

// A share group (KIP-932): per share partition its start offset, log end, lag and the
// in-flight records by state, with their delivery counts.
function renderSharePartitions(view, maxLag) {
  return el("table", { class: "offsets share" },
    el("thead", {}, el("tr", {}, el("th", {}, "partition"),
      el("th", { class: "num" }, "start"), el("th", { class: "num" }, "log end"),
      el("th", { class: "num" }, "lag"), el("th", { class: "num" }, "in flight"),
      el("th", { class: "num" }, "acquired"), el("th", {}, "deliveries"), el("th", {}, ""))),
    el("tbody", {}, view.offsets.map((r) => {
      const key = `${r.topic}-${r.partition}`;
      const counts = Object.entries(r.delivery_counts || {}).map(([n, c]) =>
        el("span", { class: Number(n) > 1 ? "chip moved" : "chip" }, `${c}×${n}`));
      return el("tr", { "data-partition": key, "data-lag": r.lag },
        el("td", { class: "mono" }, key),
        el("td", { class: "num" }, r.start_offset),
        el("td", { class: "num" }, r.log_end),
        el("td", { class: r.lag ? "num lag" : "num" }, r.lag),
        el("td", { class: "num" }, r.in_flight),
        el("td", { class: "num" }, r.acquired),
        el("td", {}, counts.length ? counts : el("span", { class: "muted" }, "—")),
        el("td", { class: "bar" }, el("span", { style: `width:${barWidth(r.lag || 0, maxLag)}%` })));
    })));
}

function renderGroups() {
  const section = document.getElementById("groups");
  const ids = [...groups.keys()].sort();
  const maxLag = Math.max(0, ...[...groups.values()].flatMap((v) => v.offsets.map((r) => r.lag || 0)));
  let note = "No groups yet.";
  if (!loaded) note = loadProblem ? `Loading… (${loadProblem}; trying again)` : "Loading…";
  section.replaceChildren(...(ids.length ? ids.map((id) => renderGroup(groups.get(id), maxLag))
    : [el("p", { class: "empty" }, note)]));
}

function renderTimeline() {
  const body = document.querySelector("#timeline tbody");
  body.replaceChildren(...timeline.map((e) => {
    const moves = (e.moved || []).map((m) =>
      el("span", { class: "chip moved" },
        `${m.topic}-${m.partition} ${m.from ? who(m.from) : ""}→${m.to ? who(m.to) : "(none)"}`));
    if (e.partitions_moved > moves.length) moves.push(`+${e.partitions_moved - moves.length} more`);
    const why = e.member ? `${e.category} (${who(e.member)})` : e.category;
    return el("tr", { "data-group": e.group, "data-generation": e.generation },
      el("td", { class: "mono" }, when(e.started || e.ts)),
      el("td", { class: "mono" }, e.group),
      el("td", { class: "num", "data-label": "generation" }, e.generation),
      el("td", { class: "why", title: e.reason }, why),
      el("td", { class: "num", "data-label": "took" }, e.duration_ms === undefined ? "—" : `${Math.round(e.duration_ms)} ms`),
      el("td", { class: "num", "data-label": "members" }, e.members === undefined ? "—" : e.members),
      el("td", { class: "moves" }, moves.length ? moves : el("span", { class: "muted" },
        e.type === "consumer" ? "epoch bump: members reconcile on their own" : "none")));
  }));
}

async function fetchGroups() {
  let body;
  try {
    const resp = await fetch("/api/groups");
    if (!resp.ok) throw new Error(`the broker answered ${resp.status}`);
    body = await resp.json();
  } catch (err) {
    if (!loaded) {
      loadProblem = err instanceof TypeError ? "the broker does not answer" : err.message;
      renderGroups();
    }
    return;
  }
  loaded = true;
  groups.clear();
  for (const view of body.groups) groups.set(view.group, view);
  renderGroups();
}

function refreshSoon() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    fetchGroups().catch(() => {});
  }, 150);
}

function onRebalance(e) {
  const key = `${e.group}/${e.phase}/${e.generation}/${e.ts}`;
  if (seen.has(key)) return;
  seen.add(key);
  if (e.phase === "end" || e.type === "consumer") {
    if (e.phase === "end") {
      lastMoves.set(e.group, {
        generation: e.generation,
        partitions: new Set((e.moved || []).map((m) => `${m.topic}-${m.partition}`)),
      });
    }
    timeline.unshift(e);
    timeline.length = Math.min(timeline.length, TIMELINE_MAX);
    renderTimeline();
  }
  refreshSoon();
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/api/events");
  source.onopen = () => { status.textContent = "live"; status.dataset.state = "live"; };
  source.onerror = () => { status.textContent = "reconnecting…"; status.dataset.state = "down"; };
  source.addEventListener("group", refreshSoon);
  source.addEventListener("commits", refreshSoon);
  source.addEventListener("rebalance", (msg) => onRebalance(JSON.parse(msg.data)));
}

fetchGroups().catch(() => {});
connect();
setInterval(() => fetchGroups().catch(() => {}), 2000);
