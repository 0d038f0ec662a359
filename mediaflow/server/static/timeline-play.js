// Plays a recording from any moment: the clip holding that moment is loaded into
// the <video> from /artifacts/{digest} (seekable: ranges) and sought to the moment
// minus the clip's start (a clip's first frame is at 0 s); at its end the next clip
// of the span follows, and at a gap the first clip of the next span. The spans are
// the newest the timeline read (`setSpans`), so a refresh never interrupts the clip
// playing; it only changes what comes next.
"use strict";

(() => {
  const { artifactUrl } = window.MediaflowWall.dom;
  const { locate, following } = window.MediaflowWall.timelineDraw;

  class RecordingPlayer {
    // `onTime(t)`: the wall-clock time shown (on every timeupdate); `onMessage(text)`:
    // what the viewer should know (an error, the end of the recording).
    constructor(video, { onTime, onMessage }) {
      this.video = video;
      this.spans = [];
      this.clip = null;
      this.loads = 0; // each load's number: a stale load's events are ignored
      this.onTime = onTime;
      this.onMessage = onMessage;
      video.addEventListener("ended", () => this.next());
      video.addEventListener("timeupdate", () => { if (this.clip) onTime(this.now()); });
      video.addEventListener("error", () => {
        if (!this.clip) return;
        const why = video.error ? video.error.message || `code ${video.error.code}` : "unknown";
        onMessage(`cannot play the clip of ${new Date(this.clip.start * 1000).toLocaleTimeString()}: ${why}`);
      });
    }

    setSpans(spans) { this.spans = spans; }

    // The wall-clock time of the frame shown, or null when nothing is loaded.
    now() { return this.clip ? this.clip.start + this.video.currentTime : null; }

    // Plays from wall-clock time `t`; false (and a message) when nothing is recorded
    // at or after it in the window.
    playAt(t) {
      const found = locate(this.spans, t);
      if (!found) {
        this.onMessage("nothing recorded at or after that time");
        return false;
      }
      this.load(found.clip, found.offset);
      return true;
    }

    next() {
      if (!this.clip) return;
      const clip = following(this.spans, this.clip);
      if (clip) this.load(clip, 0);
      else this.onMessage("end of the recording");
    }

    load(clip, offset) {
      const url = artifactUrl({ digest: clip.digest, media_type: clip.media_type }, "video");
      if (!url) { this.onMessage("a clip without a valid digest"); return; }
      const load = ++this.loads;
      this.clip = clip;
      this.onMessage("");
      const video = this.video;
      video.dataset.digest = clip.digest;
      video.dataset.clipStart = String(clip.start);
      const seek = () => {
        if (load !== this.loads) return;
        video.currentTime = Math.min(offset, Math.max(0, (video.duration || offset) - 0.05));
        video.play().catch((err) => {
          if (load === this.loads && err.name !== "AbortError") this.onMessage(`cannot play: ${err.message}`);
        });
      };
      if (video.getAttribute("src") === url && video.readyState >= 1) {
        seek();
      } else {
        video.addEventListener("loadedmetadata", seek, { once: true });
        video.src = url;
      }
      this.onTime(clip.start + offset);
    }
  }

  window.MediaflowWall.timelinePlay = Object.freeze({ RecordingPlayer });
})();
