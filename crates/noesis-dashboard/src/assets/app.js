// noesis dashboard: our own small script (the CSP allows nothing else).
// Expand or collapse every branch of a frame tree.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-expand]");
  if (!button) return;
  const open = button.dataset.expand === "all";
  const tree = button.closest(".tree") || document;
  for (const d of tree.querySelectorAll("details")) d.open = open;
});

// A live agent run or episode: its steps as they happen; the page is loaded
// again when it needs a decision or ends, so the forms and the outcome are
// current. An episode's events carry CODER's steps under `data.data` and
// its own lines (`note`, `warning`) as `data.text`.
const live = document.getElementById("live");
if (live && window.EventSource) {
  const source = new EventSource(live.dataset.events);
  const kinds = ["run_started", "model_call", "model_reply", "tool_call", "tool_result", "tools_changed", "decided",
    "error", "episode_started", "note", "warning"];
  for (const kind of kinds) {
    source.addEventListener(kind, (event) => {
      const outer = JSON.parse(event.data).data || {};
      const data = outer.data || outer;
      const item = document.createElement("li");
      item.textContent = data.text || (kind.replace("_", " ") + (data.tool ? " " + data.tool : ""));
      live.appendChild(item);
    });
  }
  // A streamed reply grows in one line per turn as the model writes it.
  let writing = null;
  source.addEventListener("text_delta", (event) => {
    const outer = JSON.parse(event.data).data || {};
    const turn = String(outer.turn);
    if (!writing || writing.dataset.turn !== turn) {
      writing = document.createElement("li");
      writing.className = "writing";
      writing.dataset.turn = turn;
      live.appendChild(writing);
    }
    writing.textContent += outer.text || "";
  });
  for (const kind of ["approval_needed", "done", "episode_done"]) {
    source.addEventListener(kind, () => {
      source.close();
      window.location.reload();
    });
  }
}
