// Busy state for the pages' forms. While a submitted form's request runs, its submit buttons are
// disabled, the form and the button pressed say aria-busy="true" and that button reads
// "Working…"; the page that answers replaces them. A page shown again from the back-forward
// cache, or a submission stopped with Escape, gets its buttons back.
(function () {
  "use strict";
  var BUSY_LABEL = "Working\u2026";

  function submitButtons(form) {
    return form.querySelectorAll("button[type=submit], button:not([type]), input[type=submit]");
  }

  function markBusy(form, pressed) {
    form.setAttribute("aria-busy", "true");
    submitButtons(form).forEach(function (button) { button.disabled = true; });
    if (pressed && pressed.tagName === "BUTTON") {
      pressed.setAttribute("aria-busy", "true");
      pressed.setAttribute("data-label", pressed.textContent);
      pressed.textContent = BUSY_LABEL;
    }
  }

  function restore() {
    document.querySelectorAll("form[aria-busy]").forEach(function (form) {
      form.removeAttribute("aria-busy");
      submitButtons(form).forEach(function (button) {
        button.disabled = false;
        button.removeAttribute("aria-busy");
        if (button.hasAttribute("data-label")) {
          button.textContent = button.getAttribute("data-label");
          button.removeAttribute("data-label");
        }
      });
    });
  }

  document.addEventListener("submit", function (event) {
    if (event.defaultPrevented) { return; }
    var form = event.target;
    var pressed = event.submitter || submitButtons(form)[0] || null;
    // After the browser has read the form's data (a button disabled before is left out of it).
    window.setTimeout(function () { markBusy(form, pressed); }, 0);
  });
  window.addEventListener("pageshow", restore);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { restore(); }
  });
})();
