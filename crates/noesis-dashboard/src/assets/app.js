// noesis dashboard: our own small script (the CSP allows nothing else).
// Expand or collapse every branch of a frame tree.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-expand]");
  if (!button) return;
  const open = button.dataset.expand === "all";
  const tree = button.closest(".tree") || document;
  for (const d of tree.querySelectorAll("details")) d.open = open;
});
