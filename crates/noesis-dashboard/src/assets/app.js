// noesis dashboard: our own small script (the CSP allows nothing else).
// Expand or collapse every branch of a frame tree.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-expand]");
  if (!button) return;
  const open = button.dataset.expand === "all";
  const tree = button.closest(".tree") || document;
  for (const d of tree.querySelectorAll("details")) d.open = open;
});

// A live agent run: its steps as they happen; the page is loaded again when
// the run needs a decision or ends, so the forms and the outcome are current.
const live = document.getElementById("live");
if (live && window.EventSource) {
  const source = new EventSource(live.dataset.events);
  const kinds = ["run_started", "model_call", "model_reply", "tool_call", "tool_result", "tools_changed", "decided", "error"];
  for (const kind of kinds) {
    source.addEventListener(kind, (event) => {
      const data = JSON.parse(event.data).data || {};
      const item = document.createElement("li");
      item.textContent = kind.replace("_", " ") + (data.tool ? " " + data.tool : "");
      live.appendChild(item);
    });
  }
  for (const kind of ["approval_needed", "done"]) {
    source.addEventListener(kind, () => {
      source.close();
      window.location.reload();
    });
  }
}
