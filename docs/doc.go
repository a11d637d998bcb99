// Package docs holds octosup's documentation, the Markdown files beside
// this one; it has no code. Its test keeps the repository self-contained:
// no file may cite a contract kept outside it, and every relative link of
// a Markdown file, and every docs/*.md a file names, must exist here.
package docs
