(function () {
  "use strict";
  // Every label, prompt and choice is set with textContent: nothing from the data is ever parsed as markup.
  var D = JSON.parse(document.getElementById("study-data").textContent);
  var KEY = "commonlink-study/" + D.study;
  var $ = function (id) { return document.getElementById(id); };
  var state = null;  // {annotator, plan, answers: {questionId: {unit, answer, ms}}}
  var shownAt = 0;
  var picked = [];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function storeKey(name) { return KEY + "/answers/" + name; }
  function save() {
    localStorage.setItem(storeKey(state.annotator), JSON.stringify(state));
    localStorage.setItem(KEY + "/current", state.annotator);
  }
  function sameSet(a, b) {
    var x = a.slice().sort(), y = b.slice().sort();
    return x.length === y.length && x.every(function (v, i) { return v === y[i]; });
  }
  function letter(k) {
    var s = "";
    k += 1;
    while (k > 0) { var r = (k - 1) % 26; s = String.fromCharCode(65 + r) + s; k = Math.floor((k - 1) / 26); }
    return s;
  }

  // The next question of a unit, or null when the unit is finished (every question answered, or a chain ended).
  function nextIn(unit) {
    for (var i = 0; i < unit.questions.length; i++) {
      var q = unit.questions[i], given = state.answers[q.id];
      if (!given) return q;
      if (unit.chain && !sameSet(given.answer, q.gold)) return null;  // a wrong step ends the chain
    }
    return null;
  }
  function position() {
    var units = state.plan.units;
    for (var i = 0; i < units.length; i++) {
      var unit = D.units[units[i]], q = nextIn(unit);
      if (q) return {index: i, unit: unit, question: q};
    }
    return {index: units.length, unit: null, question: null};
  }

  function showProgress(at) {
    var total = state.plan.units.length;
    $("progress").max = total;
    $("progress").value = at.index;
    var text = "Annotator " + state.annotator + " · " + at.index + " of " + total + " done";
    if (at.unit && at.unit.chain) {
      text += " · chain step " + (at.unit.questions.indexOf(at.question) + 1) + " of at most " + at.unit.questions.length;
    }
    $("progress-text").textContent = text;
  }

  function renderQuestion(at) {
    var box = $("question"), q = at.question;
    clear(box);
    box.hidden = false;
    box.dataset.question = q.id;
    var prompt = el("div", "prompt");
    q.parts.forEach(function (part) {
      if (part.image !== undefined) {
        var img = el("img", "study-img");
        img.setAttribute("src", part.image);
        img.setAttribute("alt", "image");
        prompt.appendChild(img);
      } else {
        prompt.appendChild(el("p", "prompt-text", part.text));
      }
    });
    box.appendChild(prompt);
    var choices = el("div", "choices");
    picked = [];
    q.choices.forEach(function (choice, k) {
      var button = el("button", "choice", q.lettered ? letter(k) + ". " + choice : choice);
      button.type = "button";
      button.dataset.index = String(k);
      button.setAttribute("aria-pressed", "false");
      button.addEventListener("click", function () { toggle(q, k); });
      choices.appendChild(button);
    });
    box.appendChild(el("p", "note", q.multi ? "Pick every choice that is true." : "Pick one."));
    box.appendChild(choices);
    var submit = el("button", "submit", "Submit");
    submit.id = "submit";
    submit.type = "button";
    submit.disabled = true;
    submit.addEventListener("click", function () { answer(at.unit, q); });
    box.appendChild(submit);
    shownAt = performance.now();
  }

  function toggle(q, k) {
    var at = picked.indexOf(k);
    if (!q.multi) picked = at >= 0 ? [] : [k];
    else if (at >= 0) picked.splice(at, 1);
    else picked.push(k);
    Array.prototype.forEach.call(document.querySelectorAll("#question button.choice"), function (b) {
      b.setAttribute("aria-pressed", picked.indexOf(Number(b.dataset.index)) >= 0 ? "true" : "false");
    });
    $("submit").disabled = picked.length === 0;
  }

  function answer(unit, q) {
    if (!picked.length) return;
    state.answers[q.id] = {unit: unit.id, answer: picked.slice().sort(function (a, b) { return a - b; }),
      ms: Math.round(performance.now() - shownAt)};
    save();
    render();
  }

  function render() {
    $("start").hidden = true;
    $("export-area").hidden = false;
    var at = position();
    showProgress(at);
    if (at.question) { $("done").hidden = true; renderQuestion(at); return; }
    $("question").hidden = true;
    clear($("done"));
    $("done").hidden = false;
    $("done").appendChild(el("h2", null, "All done: thank you."));
    $("done").appendChild(el("p", null, "Click Export answers and send the file to the study's organiser."));
  }

  function exportText() {
    var header = {format: D.answers_format, version: D.version, study: D.study, source: D.source,
      fingerprint: D.fingerprint, split: D.spec.split, spec: D.spec, annotator: state.annotator,
      planned_units: state.plan.units.length, exported: new Date().toISOString()};
    var lines = [JSON.stringify(header)];
    state.plan.units.forEach(function (u) {
      D.units[u].questions.forEach(function (q) {
        var given = state.answers[q.id];
        if (given) lines.push(JSON.stringify({unit: given.unit, item: q.id, answer: given.answer, ms: given.ms}));
      });
    });
    return lines.join("\n") + "\n";
  }

  function exportAnswers() {
    var text = exportText();
    $("export-text").value = text;
    var link = $("download");
    link.href = URL.createObjectURL(new Blob([text], {type: "application/x-ndjson"}));
    link.download = "answers-" + D.study.slice(0, 8) + "-" + state.annotator.replace(/[^A-Za-z0-9._-]+/g, "_") + ".jsonl";
    link.textContent = link.download;
    link.hidden = false;
    link.click();
  }

  function begin(name, plan) {
    name = name.trim();
    if (!name) return;
    var stored = localStorage.getItem(storeKey(name));
    state = stored ? JSON.parse(stored) : {annotator: name, plan: plan, answers: {}};
    save();
    render();
  }

  function planFor(name) {
    for (var i = 0; i < D.plans.length; i++) if (D.plans[i].annotator === name) return D.plans[i];
    return null;
  }

  function startScreen() {
    var box = $("start");
    clear(box);
    box.appendChild(el("h2", null, "Instructions"));
    var list = el("ul");
    D.instructions.forEach(function (line) { list.appendChild(el("li", null, line)); });
    box.appendChild(list);
    if (D.plans[0].annotator === null) {
      var input = el("input");
      input.id = "annotator";
      input.setAttribute("placeholder", "your name or code");
      var go = el("button", "start", "Start");
      go.id = "start-button";
      go.type = "button";
      go.addEventListener("click", function () { begin(input.value, D.plans[0]); });
      box.appendChild(el("label", null, "Annotator: "));
      box.appendChild(input);
      box.appendChild(go);
    } else {
      box.appendChild(el("p", null, "Who are you?"));
      D.plans.forEach(function (plan) {
        var b = el("button", "start", plan.annotator);
        b.type = "button";
        b.dataset.annotator = plan.annotator;
        b.addEventListener("click", function () { begin(plan.annotator, plan); });
        box.appendChild(b);
      });
    }
  }

  $("export").addEventListener("click", exportAnswers);
  var current = localStorage.getItem(KEY + "/current");
  var resumed = current !== null && localStorage.getItem(storeKey(current));
  if (resumed && (D.plans[0].annotator === null || planFor(current))) begin(current, planFor(current) || D.plans[0]);
  else startScreen();
  window.commonlinkStudy = {exportText: function () { return state ? exportText() : null; }};
})();
