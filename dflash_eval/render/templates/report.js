(function () {
  "use strict";
  // Static script of the dflash-eval HTML report: sortable tables, pagination, jump to a prompt.
  // It reads the page and never writes markup from strings (textContent only).

  function value(row, column) {
    var cell = row.cells[column];
    if (!cell) { return ""; }
    return cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim();
  }

  function pager(container, items, size) {
    var nav = document.createElement("div");
    var prev = document.createElement("button");
    var next = document.createElement("button");
    var label = document.createElement("span");
    var state = {page: 0, show: null};
    nav.className = "pager";
    prev.type = next.type = "button";
    prev.textContent = "‹ previous";
    next.textContent = "next ›";
    nav.appendChild(prev);
    nav.appendChild(label);
    nav.appendChild(next);
    container.parentNode.insertBefore(nav, container);
    function show(page) {
      var list = items();
      var pages = Math.max(1, Math.ceil(list.length / size));
      state.page = Math.min(Math.max(page, 0), pages - 1);
      list.forEach(function (item, index) {
        item.hidden = Math.floor(index / size) !== state.page;
      });
      label.textContent = "page " + (state.page + 1) + " of " + pages + " (" + list.length + " items)";
      prev.disabled = state.page === 0;
      next.disabled = state.page === pages - 1;
      nav.hidden = pages === 1;
    }
    prev.addEventListener("click", function () { show(state.page - 1); });
    next.addEventListener("click", function () { show(state.page + 1); });
    state.show = show;
    state.items = items;
    state.size = size;
    show(0);
    return state;
  }

  function sortBy(table, column, header) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var descending = header.getAttribute("aria-sort") === "ascending";
    var numeric = rows.every(function (row) {
      var v = value(row, column);
      return v === "" || v === "–" || !isNaN(Number(v));
    });
    rows.sort(function (a, b) {
      var x = value(a, column), y = value(b, column);
      var xEmpty = x === "" || x === "–", yEmpty = y === "" || y === "–";
      if (xEmpty || yEmpty) { return xEmpty === yEmpty ? 0 : (xEmpty ? 1 : -1); }
      var order = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, {numeric: true});
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(header.parentNode.cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    if (table.dfePager) { table.dfePager.show(0); }
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(head.cells, function (header, column) {
      header.title = "click to sort";
      header.addEventListener("click", function () { sortBy(table, column, header); });
    });
  });

  Array.prototype.forEach.call(document.querySelectorAll("[data-page-size]"), function (container) {
    var size = parseInt(container.getAttribute("data-page-size"), 10) || 20;
    var items = container.tagName === "TABLE"
      ? function () { return Array.prototype.slice.call(container.tBodies[0].rows); }
      : function () { return Array.prototype.slice.call(container.children); };
    var state = pager(container, items, size);
    container.dfePager = state;
  });

  function reveal(id) {
    var target = id && document.getElementById(id);
    if (!target) { return; }
    var container = target.parentNode;
    if (container && container.dfePager) {
      var index = container.dfePager.items().indexOf(target);
      if (index >= 0) { container.dfePager.show(Math.floor(index / container.dfePager.size)); }
    }
    if (target.tagName === "DETAILS") { target.open = true; }
    target.scrollIntoView();
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[href^='#']");
    if (!link) { return; }
    var id = decodeURIComponent(link.getAttribute("href").slice(1));
    if (document.getElementById(id)) {
      event.preventDefault();
      history.replaceState(null, "", "#" + id);
      reveal(id);
    }
  });
  if (location.hash) { reveal(decodeURIComponent(location.hash.slice(1))); }
}());
