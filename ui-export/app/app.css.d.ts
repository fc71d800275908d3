// The stylesheet is imported by main.ts for esbuild to bundle into app.css.
declare module "*.css";
