// @wharf/client 0.1.0: clients/js/dist/types.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
export {};
