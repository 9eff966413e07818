// droidwire dashboard: a device's live screen and remote control (docs/screen.md).
//
// One same-origin WebSocket (the session cookie rides on the handshake). The page asks for
// H.264 when this browser's WebCodecs can decode it, else for JPEG pictures (headless Chromium
// builds often lack an H.264 decoder). Frames are drawn on a canvas; only the newest picture
// is ever drawn (a frame that arrives while one is being decoded replaces the waiting one).
// Clicks become taps, a press held 600 ms a long press, a drag a swipe — all as fractions of
// the picture, which the bridge maps to the screen's real size and rotation.
"use strict";

(function () {
  const LONG_PRESS_MS = 600;
  const H264 = "avc1.42E01F";

  async function h264Decodable() {
    if (typeof VideoDecoder === "undefined") return false;
    try {
      const support = await VideoDecoder.isConfigSupported({ codec: H264, optimizeForLatency: true });
      return Boolean(support && support.supported);
    } catch (e) {
      return false;
    }
  }

  function parse(buffer) {
    const view = new DataView(buffer);
    const size = view.getUint32(0);
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, size)));
    return { header: header, data: new Uint8Array(buffer, 4 + size) };
  }

  async function start(box) {
    const canvas = document.getElementById("screen-canvas");
    const ctx = canvas.getContext("2d");
    const status = document.getElementById("screen-status");
    const control = box.dataset.control === "1";
    // ?codec=jpeg|png|h264 on the page's URL forces a codec; else H.264 where decodable.
    const forced = new URLSearchParams(window.location.search).get("codec");
    const wanted = ["jpeg", "png", "h264"].indexOf(forced) >= 0 ? forced
      : (await h264Decodable()) ? "h264" : "jpeg";
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const url = scheme + "//" + window.location.host + box.dataset.stream + "?codec=" + wanted;
    const socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    let shown = 0;
    let received = 0;
    let nextId = 1;
    let decoder = null;
    let waiting = null; // the newest picture not drawn yet
    let drawing = false;
    const stats = { shown: 0, received: 0, latencies: [], lastN: 0, lastTs: 0, codec: "" };
    window.droidwireScreen = stats;

    function say(text) { if (status) status.textContent = text; }

    function painted(header) {
      shown += 1;
      stats.shown = shown;
      stats.lastN = header.n;
      stats.lastTs = header.ts;
      if (stats.latencies.length < 10000) stats.latencies.push(Date.now() - header.ts);
      box.dataset.frames = String(shown);
      box.dataset.lastFrame = String(header.n);
      box.dataset.size = header.w + "x" + header.h;
    }

    function fit(w, h) {
      if (canvas.width !== w || canvas.height !== h) {
        canvas.width = w;
        canvas.height = h;
      }
    }

    async function drawPicture() {
      if (drawing) return;
      drawing = true;
      try {
        while (waiting) {
          const frame = waiting;
          waiting = null;
          const type = frame.header.codec === "png" ? "image/png" : "image/jpeg";
          const bitmap = await createImageBitmap(new Blob([frame.data], { type: type }));
          fit(bitmap.width, bitmap.height);
          ctx.drawImage(bitmap, 0, 0);
          bitmap.close();
          painted(frame.header);
        }
      } catch (e) {
        say("cannot draw a frame: " + e);
      } finally {
        drawing = false;
      }
    }

    function decodeH264(frame) {
      if (!decoder) {
        const pending = new Map();
        decoder = new VideoDecoder({
          output: function (video) {
            fit(video.displayWidth, video.displayHeight);
            ctx.drawImage(video, 0, 0);
            const header = pending.get(video.timestamp);
            pending.delete(video.timestamp);
            video.close();
            if (header) painted(header);
          },
          error: function (e) { say("decoder: " + e.message); },
        });
        decoder.configure({ codec: H264, optimizeForLatency: true });
        decoder.pending = pending;
      }
      if (decoder.state !== "configured") return;
      decoder.pending.set(frame.header.n, frame.header);
      decoder.decode(new EncodedVideoChunk({
        type: frame.header.key ? "key" : "delta",
        timestamp: frame.header.n,
        data: frame.data,
      }));
    }

    socket.addEventListener("message", function (event) {
      if (typeof event.data === "string") {
        let msg;
        try { msg = JSON.parse(event.data); } catch (e) { return; }
        if (msg.type === "hello") {
          stats.codec = msg.codec;
          box.dataset.codec = msg.codec;
          say("live (" + msg.codec + ", " + msg.source + (msg.control ? "" : ", read-only") + ")");
        } else if (msg.type === "eof") {
          box.dataset.ended = msg.reason || "eof";
          say("ended: " + (msg.reason || "eof"));
        } else if (msg.type === "input") {
          box.dataset.inputs = String(Number(box.dataset.inputs || "0") + 1);
          if (!msg.ok) say("input refused: " + (msg.error || "?"));
        }
        return;
      }
      const frame = parse(event.data);
      received += 1;
      stats.received = received;
      if (frame.header.codec === "h264") {
        decodeH264(frame);
      } else {
        waiting = frame;
        drawPicture();
      }
    });
    socket.addEventListener("close", function (event) {
      if (!box.dataset.ended) {
        box.dataset.ended = event.reason || "closed";
        say("closed" + (event.reason ? ": " + event.reason : ""));
      }
    });
    socket.addEventListener("error", function () { say("connection failed"); });

    function send(msg) {
      if (socket.readyState !== WebSocket.OPEN) return;
      msg.id = nextId++;
      socket.send(JSON.stringify(msg));
    }

    function at(event) {
      const rect = canvas.getBoundingClientRect();
      const x = (event.clientX - rect.left) / rect.width;
      const y = (event.clientY - rect.top) / rect.height;
      return { x: Math.min(Math.max(x, 0), 0.9999), y: Math.min(Math.max(y, 0), 0.9999) };
    }

    if (!control) return;
    let down = null;
    canvas.addEventListener("pointerdown", function (event) {
      down = { p: at(event), t: Date.now() };
      event.preventDefault();
    });
    canvas.addEventListener("pointerup", function (event) {
      if (!down) return;
      const p = at(event);
      const held = Date.now() - down.t;
      const moved = Math.hypot(p.x - down.p.x, p.y - down.p.y);
      if (moved > 0.02) {
        send({ action: "swipe", x: down.p.x, y: down.p.y, x2: p.x, y2: p.y,
               duration_ms: Math.min(Math.max(held, 100), 10000) });
      } else if (held >= LONG_PRESS_MS) {
        send({ action: "long_press", x: down.p.x, y: down.p.y, duration_ms: Math.min(held, 10000) });
      } else {
        send({ action: "tap", x: down.p.x, y: down.p.y });
      }
      down = null;
    });
    document.querySelectorAll("#screen-controls button[data-key]").forEach(function (button) {
      button.addEventListener("click", function () { send({ action: "key", key: button.dataset.key }); });
    });
    const form = document.getElementById("screen-text");
    if (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        const input = document.getElementById("screen-text-input");
        if (input.value) send({ action: "text", text: input.value.slice(0, 500) });
        input.value = "";
      });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const box = document.getElementById("screen");
    if (box && box.dataset.stream) start(box);
  });
})();
