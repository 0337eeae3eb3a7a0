// Builds the extension as Argo CD's extension installer expects it:
// dist/resources/tfops/extension-tfops.js, packed as dist/extension-tfops.tar.gz. React is not
// bundled: Argo CD's UI provides window.React (16 before Argo CD 3.5, 19 from 3.5).
// Also builds the test host's React bundles (test/dist/react16.js, react19.js).
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, rmSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist/resources/tfops", { recursive: true });
await build({
  entryPoints: ["src/index.tsx"],
  bundle: true,
  format: "iife",
  target: "es2019",
  outfile: "dist/resources/tfops/extension-tfops.js",
  logLevel: "warning",
});
execFileSync("tar", ["-czf", "dist/extension-tfops.tar.gz", "-C", "dist", "resources"]);

for (const version of ["16", "19"]) {
  await build({
    stdin: {
      contents:
        version === "16"
          ? "import * as React from 'react'; import * as ReactDOM from 'react-dom';" +
            "window.React = React; window.ReactDOM = ReactDOM;" +
            "window.mountTab = (el, node) => ReactDOM.render(el, node);"
          : "import * as React from 'react'; import * as ReactDOM from 'react-dom'; import { createRoot } from 'react-dom/client';" +
            "window.React = React; window.ReactDOM = ReactDOM;" +
            "window.mountTab = (el, node) => createRoot(node).render(el);",
      resolveDir: ".",
    },
    bundle: true,
    format: "iife",
    alias: { react: `react${version}`, "react-dom": `react-dom${version}` },
    define: { "process.env.NODE_ENV": '"production"' },
    outfile: `test/dist/react${version}.js`,
    logLevel: "warning",
  });
}

// Font Awesome, which Argo CD's UI loads and the tab's icons use: the test hosts load it too.
const fa = "node_modules/@fortawesome/fontawesome-free";
cpSync(`${fa}/css/all.min.css`, "test/dist/fontawesome/css/all.min.css");
cpSync(`${fa}/webfonts`, "test/dist/fontawesome/webfonts", { recursive: true });
