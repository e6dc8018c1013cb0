export * from "./client.js";
export * from "./effect.js";
export * from "./errors.js";
export * from "./hashing.js";
export * from "./outcomes.js";
export * from "./tools.js";
export type { components as SidecarSchemas, paths as SidecarPaths } from "./generated/sidecar.js";
