// droidwire dashboard: install an APK with a progress bar.
//
// The form's file is sent as the raw body of a same-origin POST (the session cookie goes with
// it, no token in the page); XMLHttpRequest because fetch() reports no upload progress. When
// the controller answers, the page reloads to show the app (or the error it sent).
"use strict";

(function () {
  function start(form) {
    const input = form.querySelector("input[type=file]");
    const bar = form.querySelector("progress");
    const status = form.querySelector(".upload-status");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const file = input.files && input.files[0];
      if (!file) return;
      const xhr = new XMLHttpRequest();
      xhr.open("POST", form.dataset.target);
      xhr.setRequestHeader("Content-Type", "application/vnd.android.package-archive");
      xhr.upload.onprogress = function (e) {
        if (e.lengthComputable) {
          bar.max = e.total;
          bar.value = e.loaded;
          status.textContent = Math.floor((100 * e.loaded) / e.total) + "%";
        }
      };
      xhr.onload = function () {
        let message = "installed";
        try {
          const body = JSON.parse(xhr.responseText);
          message = xhr.status < 300 ? "installed " + body.package
                                     : "refused: " + body.error.message;
        } catch (err) {
          message = "HTTP " + xhr.status;
        }
        status.textContent = message;
        if (xhr.status < 300) window.location.reload();
      };
      xhr.onerror = function () {
        status.textContent = "upload failed";
      };
      status.textContent = "0%";
      xhr.send(file);
    });
  }

  document.querySelectorAll("form.upload[data-target]").forEach(start);
})();
