// Pages for features that plugins will bring: they say so rather than show empty tables.

import { h, replace } from "./dom.js";

export function shovels(page) {
  replace(page.main, h("h1", {}, "Shovels and federation"),
    h("p", { class: "notice info" },
      "Shovels and federation come with the shovel and federation plugins, which Lavin does not have yet: ",
      "this broker runs no shovels and no federation links. Their status will be listed here when those plugins exist."));
}
