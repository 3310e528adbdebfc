// Busy state for the pages' forms. While a submitted form's request runs, its submit buttons are
// disabled, the form and the button pressed say aria-busy="true" and that button reads
// "Working…"; the page that answers replaces them. A page shown again from the back-forward
// cache, or a submission stopped with Escape, gets its buttons back. The page that answers a
// submit moves the focus to its results; the model and accelerator pickers get a search box.
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
    remember(form);
    // After the browser has read the form's data (a button disabled before is left out of it).
    window.setTimeout(function () { markBusy(form, pressed); }, 0);
  });
  window.addEventListener("pageshow", restore);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { restore(); }
  });

  // Focus after a submit: the page that answers a submitted form moves the focus to its results
  // ([data-results], tabindex=-1), so a keyboard or screen-reader user lands on the answer, not
  // at the top of the page. A field the server marked autofocus (the first refused input) keeps
  // it. "Submitted" is remembered for the next page load of the form's own address; where
  // sessionStorage is unavailable, a page opened with a query counts as submitted.
  var SUBMITTED = "planner-submitted";

  function remember(form) {
    try {
      window.sessionStorage.setItem(SUBMITTED, new URL(form.action, location.href).pathname);
    } catch (e) { /* storage off: the query decides */ }
  }

  function cameFromSubmit() {
    try {
      var path = window.sessionStorage.getItem(SUBMITTED);
      window.sessionStorage.removeItem(SUBMITTED);
      return path === location.pathname;
    } catch (e) {
      return location.search.length > 1;
    }
  }

  function focusResults() {
    var submitted = cameFromSubmit();
    var results = document.querySelector("[data-results]");
    if (!submitted || !results || document.querySelector("[autofocus]")) { return; }
    var top = results.getBoundingClientRect().top;
    // Results already in view (a wide screen) stay where they are; else they scroll to the top.
    results.focus({ preventScroll: top >= 0 && top < window.innerHeight });
  }

  // Searchable pickers: a search box (input list=datalist) over a grouped select. Choosing or
  // typing one of its ids sets the select, which is what the form submits; Enter picks the one
  // id that contains the text typed, and never submits a stale choice.
  function pickerMatches(select, text) {
    var needle = text.trim().toLowerCase();
    var exact = null, partial = [];
    Array.prototype.forEach.call(select.options, function (option) {
      var value = option.value.toLowerCase();
      if (!value) { return; }
      if (value === needle) { exact = option; }
      if (needle && value.indexOf(needle) !== -1) { partial.push(option); }
    });
    return exact ? [exact] : partial;
  }

  function wirePicker(box) {
    var select = document.getElementById(box.getAttribute("data-for"));
    if (!select) { return; }
    box.hidden = false;
    function choose(option) {
      if (select.value !== option.value) {
        select.value = option.value;
        select.dispatchEvent(new Event("change", { bubbles: true }));
      }
    }
    box.addEventListener("input", function () {
      var found = pickerMatches(select, box.value);
      if (found.length === 1 && found[0].value.toLowerCase() === box.value.trim().toLowerCase()) {
        choose(found[0]);
      }
    });
    box.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") { return; }
      var found = pickerMatches(select, box.value);
      if (found.length === 1) {
        choose(found[0]);
        box.value = found[0].value;
      } else if (box.value.trim()) {
        event.preventDefault(); // none, or several: nothing to pick, nothing stale to submit
      }
    });
  }

  function ready() {
    document.querySelectorAll("input.picker-search[data-for]").forEach(wirePicker);
    focusResults();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }
})();
