// touba-trigger console: the only script. It says, while the operator
// types, whether a result JSON is valid; the server checks it again
// before anything is stored, so the pages work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("textarea[data-json]").forEach(function (area) {
    var out = document.getElementById(area.dataset.json);
    if (!out) { return; }
    var check = function () {
      var text = area.value.trim();
      if (text === "") { out.textContent = "empty: the result stored is {\"receipt_ref\": REF}"; out.className = "hint"; return; }
      try { JSON.parse(text); out.textContent = "valid JSON"; out.className = "good"; }
      catch (e) { out.textContent = "not valid JSON: " + e.message; out.className = "bad"; }
    };
    area.addEventListener("input", check);
    check();
  });
});
