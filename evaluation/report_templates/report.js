// The report's only script (no model text runs: pages are escaped and figures are JSON data).
// Draws each Plotly figure, filters the question table, and records in the DOM what a test checks.
function drawCharts() {
  const figures = [...document.querySelectorAll("script.figure")];
  return Promise.all(figures.map((el) => {
    const figure = JSON.parse(el.textContent);
    return Plotly.newPlot(el.dataset.target, figure.data, figure.layout, { displayModeBar: false, responsive: true });
  }));
}

function filterQuestions(form) {
  const wanted = Object.fromEntries(new FormData(form));
  const rows = [...document.querySelectorAll("#questions tr.question")];
  let shown = 0;
  for (const row of rows) {
    const hide = ["method", "type", "outcome"].some((name) => wanted[name] && row.dataset[name] !== wanted[name])
      || (wanted.disagree === "1" && row.dataset.disagree !== "1");
    row.hidden = hide;
    shown += hide ? 0 : 1;
  }
  document.getElementById("shown").textContent = `${shown} of ${rows.length} shown`;
}

function setUpFilters() {
  const form = document.getElementById("filters");
  if (!form) return;
  // Filters can be given in the address (questions.html?method=traveler&outcome=wrong) and stay there.
  const query = new URLSearchParams(location.search);
  for (const [name, value] of query) {
    const field = form.elements[name];
    if (field && field.type === "checkbox") field.checked = value === field.value;
    else if (field) field.value = value;
  }
  form.addEventListener("change", () => {
    filterQuestions(form);
    const params = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
    history.replaceState(null, "", params.size ? `?${params}` : location.pathname);
  });
  filterQuestions(form);
}

window.addEventListener("load", () => {
  setUpFilters();
  document.body.dataset.imagesLoaded = [...document.images].filter((i) => i.complete && i.naturalWidth > 0).length;
  drawCharts().then(() => { document.body.dataset.chartsDrawn = document.querySelectorAll(".js-plotly-plot").length; });
});
