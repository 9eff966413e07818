// droidwire dashboard: the live logcat tail.
//
// Opens the same-origin WebSocket named by the <pre data-stream> element; the browser sends
// the session cookie with the handshake (no token in the page or the URL). Messages are
// {"lines": [...], "dropped": N, "eof"?: true, "reason"?: "..."} as the REST stream sends.
// Lines are appended as text nodes (never HTML) and the view keeps the last MAX_LINES.
"use strict";

(function () {
  const MAX_LINES = 2000;
  const MARKERS = ["StrictMode", "ANR in ", "FATAL EXCEPTION"];

  function start(pre) {
    const status = document.getElementById("logcat-status");
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(scheme + "//" + window.location.host + pre.dataset.stream);
    let shown = 0;

    function say(text) {
      if (status) status.textContent = text;
    }

    function append(line, cls) {
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = line + "\n";
      pre.appendChild(span);
      shown += 1;
      while (shown > MAX_LINES && pre.firstChild) {
        pre.removeChild(pre.firstChild);
        shown -= 1;
      }
    }

    socket.addEventListener("open", function () { say("live"); });
    socket.addEventListener("message", function (event) {
      let chunk;
      try {
        chunk = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (chunk.dropped) append("… " + chunk.dropped + " lines dropped …", "gap");
      for (const line of chunk.lines || []) {
        const hot = MARKERS.some(function (m) { return line.indexOf(m) !== -1; });
        append(String(line), hot ? "line violation" : "line");
      }
      if (stick) pre.scrollTop = pre.scrollHeight;
      pre.dataset.lines = String(shown);
      if (chunk.eof) say("ended: " + (chunk.reason || "eof"));
    });
    socket.addEventListener("close", function (event) {
      if (!status || status.textContent.indexOf("ended") !== 0) {
        say("closed" + (event.reason ? ": " + event.reason : ""));
      }
    });
    socket.addEventListener("error", function () { say("connection failed"); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const pre = document.getElementById("logcat");
    if (pre && pre.dataset.stream) start(pre);
  });
})();
