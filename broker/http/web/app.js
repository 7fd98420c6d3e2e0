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

function who(member) {
  if (!member) return "—";
  return member.client_id || member.instance_id || member.member_id;
}

function when(ts) {
  return new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
}

function renderGroup(view) {
  const moved = lastMoves.get(view.group);
  const movedNow = moved && moved.generation === view.generation ? moved.partitions : new Set();
  const members = el("table", { class: "members" },
    el("thead", {}, el("tr", {}, el("th", {}, "client id"), el("th", {}, "host"),
      el("th", {}, "instance id"), el("th", {}, "partitions"))),
    el("tbody", {}, view.members.map((m) => el("tr", { "data-member": m.client_id },
      el("td", { class: "mono" }, m.client_id),
      el("td", { class: "mono" }, m.host),
      el("td", { class: "mono" }, m.instance_id || "—"),
      el("td", {}, m.partitions.length ? m.partitions.map((p) => {
        const key = `${p.topic}-${p.partition}`;
        return el("span", { class: movedNow.has(key) ? "chip moved" : "chip" }, key);
      }) : el("span", { class: "muted" }, "none"))))));
  const maxLag = Math.max(1, ...view.offsets.map((r) => r.lag || 0));
  const offsets = view.type === "share" ? renderSharePartitions(view, maxLag) : el("table", { class: "offsets" },
    el("thead", {}, el("tr", {}, el("th", {}, "partition"), el("th", {}, "owner"),
      el("th", { class: "num" }, "committed"), el("th", { class: "num" }, "log end"),
      el("th", { class: "num" }, "lag"), el("th", {}, ""))),
    el("tbody", {}, view.offsets.map((r) => {
      const key = `${r.topic}-${r.partition}`;
      const lag = r.lag === null ? "—" : r.lag;
      return el("tr", { "data-partition": key, "data-lag": r.lag, class: movedNow.has(key) ? "moved" : null },
        el("td", { class: "mono" }, key),
        el("td", { class: "mono" }, r.client_id || "—"),
        el("td", { class: "num" }, r.committed === null ? "—" : r.committed),
        el("td", { class: "num" }, r.log_end === null ? "—" : r.log_end),
        el("td", { class: r.lag ? "num lag" : "num" }, lag),
        el("td", { class: "bar" }, el("span", { style: `width:${Math.round(100 * (r.lag || 0) / maxLag)}%` })));
    })));
  return el("article", { class: "group", "data-group": view.group, "data-generation": view.generation, "data-state": view.state },
    el("h2", {}, view.group, " ",
      el("span", { class: `state state-${view.state}` }, view.state)),
    el("dl", {},
      el("dt", {}, "generation"), el("dd", { class: "generation" }, view.generation),
      el("dt", {}, "protocol"), el("dd", {}, `${view.type} · ${view.protocol_type || "—"} / ${view.protocol || "—"}`),
      el("dt", {}, "members"), el("dd", {}, view.members.length),
      el("dt", {}, "lag"), el("dd", { class: "total-lag" }, view.lag)),
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
        el("td", { class: "bar" }, el("span", { style: `width:${Math.round(100 * (r.lag || 0) / maxLag)}%` })));
    })));
}

function renderGroups() {
  const section = document.getElementById("groups");
  const ids = [...groups.keys()].sort();
  section.replaceChildren(...(ids.length ? ids.map((id) => renderGroup(groups.get(id)))
    : [el("p", { class: "empty" }, "No groups yet.")]));
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
      el("td", { class: "num" }, e.generation),
      el("td", { title: e.reason }, why),
      el("td", { class: "num" }, e.duration_ms === undefined ? "—" : `${Math.round(e.duration_ms)} ms`),
      el("td", { class: "num" }, e.members === undefined ? "—" : e.members),
      el("td", { class: "moves" }, moves.length ? moves : el("span", { class: "muted" },
        e.type === "consumer" ? "epoch bump: members reconcile on their own" : "none")));
  }));
}

async function fetchGroups() {
  const resp = await fetch("/api/groups");
  if (!resp.ok) return;
  const body = await resp.json();
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
