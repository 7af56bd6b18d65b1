// commonlink eval report: builds the example cards from the embedded JSON.
// Every string from a dataset or a model is put on the page with textContent (never innerHTML), so it is shown
// as text whatever it holds.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  if (D.kind === "summary") {  // runs without example cards: the metrics are the page
    document.getElementById("examples").hidden = true;
    var link = document.querySelector('nav.toc a[href="#examples"]');
    if (link) link.hidden = true;
    return;
  }
  var rows = D.rows, runs = D.runs;
  var state = { page: 0, focus: null, mistakesShown: 20 };
  var controls = document.getElementById("controls");
  var cardsBox = document.getElementById("cards");
  var statusBox = document.getElementById("status");
  var pager = document.getElementById("pager");
  var mistakesBox = document.getElementById("mistakes");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function letters(n) {
    var out = [];
    for (var i = 0; i < n; i++) {
      var label = "", k = i;
      while (true) { label = String.fromCharCode(65 + (k % 26)) + label; k = Math.floor(k / 26) - 1; if (k < 0) break; }
      out.push(label);
    }
    return out;
  }
  function select(id, label, options) {
    var wrap = el("label", "ctl", label + " ");
    var s = el("select");
    s.id = id;
    options.forEach(function (o) { var opt = el("option", null, o[1]); opt.value = o[0]; s.appendChild(opt); });
    s.addEventListener("change", function () { state.page = 0; state.focus = null; render(); });
    wrap.appendChild(s);
    controls.appendChild(wrap);
    return s;
  }
  function value(id, fallback) { var e = document.getElementById(id); return e ? e.value : (fallback || "all"); }
  function uniq(values) {
    var seen = {}, out = [];
    values.forEach(function (v) { var k = String(v); if (!(k in seen)) { seen[k] = 1; out.push(v); } });
    return out.sort(function (a, b) { return (typeof a === "number" && typeof b === "number") ? a - b : String(a).localeCompare(String(b)); });
  }
  function img(url, alt) {
    if (!url) return el("div", "noimg", "no image");
    var i = el("img");
    i.loading = "lazy";
    i.decoding = "async";
    i.src = url;
    i.alt = alt;
    return i;
  }
  function figure(url, caption, cls) {
    var f = el("figure", cls || null);
    add(f, img(url, caption), el("figcaption", null, caption));
    return f;
  }
  function outputBlock(title, text, fullLength) {
    var d = el("details", "output");
    add(d, el("summary", null, title));
    var pre = el("pre", "raw", text === null || text === undefined ? "(no output: the backend failed on this request)" : text);
    d.appendChild(pre);
    if (fullLength) d.appendChild(el("p", "note", "Cut at " + text.length + " of " + fullLength + " characters; predictions.jsonl has it whole."));
    return d;
  }

  // ------------------------------------------------------------------------------------------- Common-O
  function maxObjects(r) { return Math.max(r.n[0] || 0, r.n[1] || 0); }
  function outsFor(r, m) {
    if (m === "any") return r.r.filter(function (o) { return o; });
    var o = r.r[+m];
    return o ? [o] : [];
  }
  function commonOMatches(r) {
    var m = value("f-model", "any"), show = value("f-show"), src = value("f-source"), objs = value("f-objects");
    var q = (document.getElementById("f-search") || {}).value || "";
    if (src !== "all" && r.s !== src) return false;
    if (objs !== "all" && String(maxObjects(r)) !== objs) return false;
    var outs = outsFor(r, m);
    if (!outs.length) return false;
    if (show === "wrong" && !outs.some(function (o) { return !o.ok; })) return false;
    if (show === "correct" && !outs.every(function (o) { return o.ok; })) return false;
    if (show === "hallucinated" && !outs.some(function (o) { return o.h.length > 0; })) return false;
    if (show === "parse" && !outs.some(function (o) { return !o.pok; })) return false;
    if (show === "disagree") {
      var picks = uniq(r.r.filter(function (o) { return o; }).map(function (o) { return o.p.join(","); }));
      if (picks.length < 2) return false;
    }
    if (q) {
      q = q.toLowerCase();
      var hay = (r.id + " " + r.c.join(" ")).toLowerCase();
      if (hay.indexOf(q) < 0) return false;
    }
    return true;
  }
  function commonOControls() {
    if (runs.length > 1) select("f-model", "Model", [["any", "any model"]].concat(runs.map(function (name, i) { return [String(i), name]; })));
    var show = [["all", "all examples"], ["wrong", "wrong only"], ["correct", "correct only"], ["hallucinated", "hallucinated"], ["parse", "parse failures"]];
    if (runs.length > 1) show.push(["disagree", "models disagree"]);
    select("f-show", "Show", show);
    select("f-source", "Source", [["all", "real + synthetic"]].concat(uniq(rows.map(function (r) { return r.s; })).map(function (s) { return [s, s]; })));
    select("f-objects", "Objects per image", [["all", "any"]].concat(uniq(rows.map(maxObjects)).map(function (n) { return [String(n), String(n)]; })));
    var search = el("label", "ctl", "Find ");
    var input = el("input");
    input.id = "f-search";
    input.type = "search";
    input.placeholder = "id or object";
    input.addEventListener("input", function () { state.page = 0; state.focus = null; render(); });
    add(controls, add(search, input));
  }
  function commonOCard(r) {
    var card = el("article", "card");
    card.dataset.id = r.id;
    var labels = letters(r.c.length);
    var truth = {};
    r.t.forEach(function (l) { truth[l] = 1; });
    var head = el("div", "card-head");
    add(head, el("span", "rid", "#" + r.i + " · " + r.id), el("span", "tag src-" + (r.s === "real" ? "real" : "other"), r.s),
        el("span", "tag", "objects " + r.n[0] + " / " + r.n[1]));
    var tl = el("span", "truth-line", "Truth ");
    add(tl, el("b", "truth-letters", r.t.join(", ")));
    head.appendChild(tl);
    r.r.forEach(function (o, i) {
      if (!o) return;
      var badge = el("span", "verdict " + (o.ok ? "ok" : "bad"), (runs.length > 1 ? runs[i] + ": " : "") + (o.ok ? "✓ correct" : (o.pok ? "✗ wrong" : "✗ unparseable")));
      badge.dataset.run = i;
      head.appendChild(badge);
    });
    card.appendChild(head);
    var body = el("div", "card-body");
    var pics = el("div", "pics");
    add(pics, figure(r.im && r.im[0], "Image 1 · " + r.n[0] + " objects"), figure(r.im && r.im[1], "Image 2 · " + r.n[1] + " objects"));
    body.appendChild(pics);
    var table = el("table", "choices");
    var hr = el("tr");
    add(hr, el("th", null, ""), el("th", null, "Choice"), el("th", null, "Truth"));
    r.r.forEach(function (o, i) { var th = el("th", "runcol", runs.length > 1 ? runs[i] : "Picked"); th.title = runs[i]; hr.appendChild(th); });
    table.appendChild(hr);
    r.c.forEach(function (name, k) {
      var L = labels[k], tr = el("tr");
      tr.dataset.letter = L;
      if (truth[L]) tr.className = "truth";
      add(tr, el("td", "letter", L), el("td", "name", name), el("td", "mark", truth[L] ? "✓" : ""));
      r.r.forEach(function (o) {
        var td = el("td", "mark");
        if (o) {
          var picked = o.p.indexOf(L) >= 0;
          if (picked && truth[L]) { td.className = "mark hit"; td.textContent = "●"; td.title = "picked, correct"; }
          else if (picked && name === D.none) { td.className = "mark wrongnone"; td.textContent = "●"; td.title = "picked \"no objects\", but there are"; }
          else if (picked) { td.className = "mark halluc"; td.textContent = "●"; td.title = "picked, not in both images: hallucinated"; }
          else if (truth[L]) { td.className = "mark miss"; td.textContent = "○"; td.title = "missed"; }
        } else { td.textContent = "–"; td.title = "not in this run"; }
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    body.appendChild(table);
    card.appendChild(body);
    var outs = el("div", "outputs");
    r.r.forEach(function (o, i) {
      if (!o) return;
      var line = el("p", "parsed");
      line.dataset.run = i;
      add(line, el("span", "who", runs[i] + ": "));
      if (o.pok) {
        add(line, document.createTextNode("picked "), el("b", "pick-letters", o.p.join(", ")));
      } else {
        add(line, el("b", "pick-letters parse-fail", "unparseable"), document.createTextNode(" — " + (o.e || "no answer found")));
      }
      if (o.h.length) add(line, document.createTextNode(" · hallucinated: "), el("span", "halluc-names", o.h.join(", ")));
      outs.appendChild(line);
      outs.appendChild(outputBlock("Raw output of " + runs[i], o.o, o.ol));
    });
    card.appendChild(outs);
    return card;
  }
  function commonOMistakes(box) {
    box.textContent = "";
    add(box, el("h3", null, "Random mistakes (seed " + D.seed + ")"),
        el("p", "note", "Wrong answers drawn at random, laid out like the Common-O paper's appendix table. Click an id to see its card."));
    var table = el("table", "mistakes");
    var hr = el("tr");
    ["Model", "Choices (enumerated by letter to the model)", "Ground truth", "Prediction", "Example"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
    table.appendChild(hr);
    D.mistakes.slice(0, state.mistakesShown).forEach(function (pair) {
      var r = rows[pair[0]], o = r.r[pair[1]], labels = letters(r.c.length);
      var tr = el("tr");
      tr.dataset.id = r.id;
      var choices = r.c.map(function (c, k) { return labels[k] + ". " + c; }).join(", ");
      var link = el("a", null, r.id);
      link.href = "#examples";
      link.addEventListener("click", function () { state.focus = r.id; state.page = 0; showMistakes(false); render(); });
      var tdLink = el("td");
      tdLink.appendChild(link);
      add(tr, el("td", null, runs[pair[1]]), el("td", "choice-list", "[" + choices + "]"), el("td", "gt", r.t.join(", ")),
          el("td", "pred", o.pok ? (o.p.join(", ") || "(none)") : "(unparseable)"), tdLink);
      table.appendChild(tr);
    });
    box.appendChild(table);
    if (D.mistakes.length > state.mistakesShown) {
      var more = el("button", null, "Show more (" + (D.mistakes.length - state.mistakesShown) + " left)");
      more.addEventListener("click", function () { state.mistakesShown += 20; commonOMistakes(box); });
      box.appendChild(more);
    }
    if (!D.mistakes.length) box.appendChild(el("p", null, "No mistakes."));
  }

  // ------------------------------------------------------------------------------------------- chains
  function chainMatches(c) {
    var concept = value("f-concept"), ended = value("f-ended");
    if (concept !== "all" && c.concept !== concept) return false;
    if (ended !== "all" && c.ended !== ended) return false;
    return true;
  }
  function pickFigure(url, caption, labels, cls) {
    var f = figure(url, caption, cls);
    if (labels && labels.length) f.appendChild(el("div", "labels", labels.join(", ")));
    return f;
  }
  function chainCard(c) {
    var card = el("article", "card chain");
    card.dataset.id = c.id;
    var head = el("div", "card-head");
    add(head, el("span", "rid", c.id), el("span", "tag", c.concept), el("span", "tag", c.kind),
        el("span", "verdict " + (c.ok ? "ok" : "bad"), "length " + c.len + " · ended: " + c.ended));
    card.appendChild(head);
    var note = c.warm + " warm-up step" + (c.warm === 1 ? "" : "s") + " (answered for the model), " + c.scored + " scored";
    if (c.hidden) note += "; the first " + c.hidden + " logged steps are not shown (all correct)";
    card.appendChild(el("p", "note", note + "."));
    var warmBox = null;
    c.steps.forEach(function (s) {
      var st = el("div", "step" + (s.w ? " warm" : "") + (s.ok ? "" : " failed"));
      st.dataset.step = s.k;
      // scored steps are numbered from the first scored one (Step 1), warm-ups apart (Warm-up 1..W): s.k counts both
      var title = (s.w ? "Warm-up " + (s.k + 1) : "Step " + (s.k - c.warm + 1)) + " · concept " + s.concept + (s.bridge ? " · bridge" : "");
      var verdict = s.w ? "forced correct" : (s.ch === null || s.ch === undefined ? "✗ unparseable" : (s.ok ? "✓ picked " + (s.ch + 1) : "✗ picked " + (s.ch + 1) + ", answer " + (s.a + 1)));
      add(st, add(el("div", "step-head"), el("b", null, title), el("span", "verdict " + (s.ok ? "ok" : "bad"), verdict)));
      var pics = el("div", "pics three");
      pics.appendChild(pickFigure(s.q, "query · " + s.qid, s.ql, "query"));
      var pick = s.w ? null : s.ch;  // a warm-up step's choice is the answer, given, not picked
      s.cand.forEach(function (u, i) {
        var cls = "cand" + (i === s.a ? " answer" : "") + (i === pick ? (i === s.a ? " chosen-ok" : " chosen-bad") : "");
        var cap = "Image" + (i + 1) + " · " + s.cid[i] + (i === s.a ? " · answer" : "") + (i === pick ? " · model's pick" : "");
        pics.appendChild(pickFigure(u, cap, s.cl[i], cls));
      });
      st.appendChild(pics);
      var mem = el("div", "memory");
      add(mem, el("span", "label", "Memory shown to the model:"),
          el("pre", "mem", s.mem || (D.memory === "nom" ? "(none: NoM)" : "(empty)")));
      st.appendChild(mem);
      (s.out || []).forEach(function (o, i) { st.appendChild(outputBlock("Selection output" + (s.out.length > 1 ? " (model " + (i + 1) + ")" : ""), o)); });
      if (s.w) {
        st.appendChild(el("p", "deduction", "The memory learns the step's concept: " + s.concept + "."));
      } else if (s.gold || (s.ded !== undefined && s.ded !== null)) {
        var d = el("p", "deduction " + (s.dok ? "ok" : "bad"));
        add(d, el("span", "label", "Deduction: "), document.createTextNode((s.ded || []).join(", ") || "(none)"),
            document.createTextNode(" · shared: " + (s.gold || []).join(", ")), el("b", null, s.dok ? " ✓" : " ✗"));
        st.appendChild(d);
        (s.dout || []).forEach(function (o) { st.appendChild(outputBlock("Deduction output", o)); });
      }
      if (s.w) {  // warm-up steps fold away: the scored steps, and the one that ended the chain, come first to the eye
        if (!warmBox) {
          warmBox = el("details", "warmups");
          var n = c.steps.filter(function (x) { return x.w; }).length;
          warmBox.appendChild(el("summary", null, n + " warm-up step" + (n === 1 ? "" : "s") + " shown here (answered for the model; the memory learns their concept)"));
          card.appendChild(warmBox);
        }
        warmBox.appendChild(st);
      } else {
        card.appendChild(st);
      }
    });
    return card;
  }
  function chainControls() {
    select("f-concept", "Concept", [["all", "all"]].concat(uniq(rows.map(function (c) { return c.concept; })).map(function (v) { return [v, v]; })));
    select("f-ended", "Ended by", [["all", "any"]].concat(uniq(rows.map(function (c) { return c.ended; })).map(function (v) { return [v, v]; })));
  }

  // ------------------------------------------------------------------------------------------- single step / deduction
  function taskMatches(t) {
    var concept = value("f-concept"), show = value("f-show");
    if (concept !== "all" && t.concept !== concept) return false;
    if (show === "wrong" && t.ok) return false;
    if (show === "correct" && !t.ok) return false;
    return true;
  }
  function taskControls() {
    select("f-concept", "Concept", [["all", "all"]].concat(uniq(rows.map(function (t) { return t.concept; })).map(function (v) { return [v, v]; })));
    select("f-show", "Show", [["all", "all tasks"], ["wrong", "wrong only"], ["correct", "correct only"]]);
  }
  function taskCard(t) {
    var card = el("article", "card task");
    card.dataset.id = t.id;
    var head = el("div", "card-head");
    add(head, el("span", "rid", t.id), el("span", "tag", t.concept), el("span", "verdict " + (t.ok ? "ok" : "bad"), t.ok ? "✓ correct" : (t.failed ? "✗ no answer" : "✗ wrong")));
    card.appendChild(head);
    var pics = el("div", "pics three");
    t.im.forEach(function (u, i) {
      var cand = D.kind === "single_step" && i > 0 ? i - 1 : -1;
      var cls = cand >= 0 ? "cand" + (cand === t.a ? " answer" : "") + (cand === t.ch ? (cand === t.a ? " chosen-ok" : " chosen-bad") : "") : "";
      pics.appendChild(pickFigure(u, t.names[i] + " · " + t.ids[i] + (cand >= 0 && cand === t.a ? " · answer" : "") + (cand >= 0 && cand === t.ch ? " · model's pick" : ""), t.labels[i], cls));
    });
    card.appendChild(pics);
    (t.out || []).forEach(function (o) { card.appendChild(outputBlock(D.kind === "single_step" ? "Selection output" : "Deduction output", o)); });
    if (t.gold) {
      var d = el("p", "deduction " + (t.dok ? "ok" : "bad"));
      add(d, el("span", "label", "Deduction: "), document.createTextNode((t.ded || []).join(", ") || "(none)"),
          document.createTextNode(" · shared: " + t.gold.join(", ")), el("b", null, t.dok ? " ✓" : " ✗"));
      card.appendChild(d);
    }
    if (D.kind === "single_step") (t.dout || []).forEach(function (o) { card.appendChild(outputBlock("Deduction output", o)); });
    return card;
  }

  // ------------------------------------------------------------------------------------------- shared frame
  var kind = D.kind === "common_o" ? { controls: commonOControls, matches: commonOMatches, card: commonOCard, unit: "examples" }
    : D.kind === "chains" ? { controls: chainControls, matches: chainMatches, card: chainCard, unit: "chains" }
    : { controls: taskControls, matches: taskMatches, card: taskCard, unit: "tasks" };

  function showMistakes(on) {
    mistakesBox.hidden = !on;
    cardsBox.hidden = on;
    pager.hidden = on;
    statusBox.hidden = on;
    var b = document.getElementById("view-mistakes");
    if (b) b.textContent = on ? "Back to the cards" : "Random mistakes";
    if (on) commonOMistakes(mistakesBox);
  }
  function render() {
    var list = state.focus ? rows.filter(function (r) { return r.id === state.focus; }) : rows.filter(kind.matches);
    var size = D.page_size || 25, pages = Math.max(1, Math.ceil(list.length / size));
    if (state.page >= pages) state.page = pages - 1;
    var first = state.page * size, shown = list.slice(first, first + size);
    cardsBox.textContent = "";
    shown.forEach(function (r) { cardsBox.appendChild(kind.card(r)); });
    statusBox.textContent = "";
    if (state.focus) {
      var back = el("button", null, "Show all again");
      back.addEventListener("click", function () { state.focus = null; render(); });
      add(statusBox, document.createTextNode("Showing " + state.focus + " "), back);
    } else {
      statusBox.textContent = list.length ? "Showing " + (first + 1) + "–" + (first + shown.length) + " of " + list.length + " matching " + kind.unit +
        " (" + rows.length + " in all)" : "No " + kind.unit + " match these filters (" + rows.length + " in all).";
    }
    pager.textContent = "";
    if (pages > 1 && !state.focus) {
      var prev = el("button", null, "◀ Previous"), next = el("button", null, "Next ▶");
      prev.disabled = state.page === 0;
      next.disabled = state.page >= pages - 1;
      prev.addEventListener("click", function () { state.page--; render(); document.getElementById("examples").scrollIntoView(); });
      next.addEventListener("click", function () { state.page++; render(); document.getElementById("examples").scrollIntoView(); });
      add(pager, prev, el("span", "pageno", "Page " + (state.page + 1) + " of " + pages), next);
    }
  }
  kind.controls();
  if (D.kind === "common_o") {
    var key = el("p", "note marks-key");
    add(key, el("b", "mk hit", "●"), document.createTextNode(" picked, in both images · "), el("b", "mk halluc", "●"),
        document.createTextNode(" picked, not in both (hallucinated) · "), el("b", "mk wrongnone", "●"),
        document.createTextNode(" picked “no objects” wrongly · "), el("b", "mk miss", "○"), document.createTextNode(" missed"));
    controls.parentNode.insertBefore(key, controls.nextSibling);
    var toggle = el("button", "view", "Random mistakes");
    toggle.id = "view-mistakes";
    toggle.addEventListener("click", function () { showMistakes(mistakesBox.hidden); });
    controls.appendChild(toggle);
  }
  render();
})();
