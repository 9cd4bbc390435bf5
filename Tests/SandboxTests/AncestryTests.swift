import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// `firstOverlap`, which the broker's protected-folder check relies on:
/// what overlaps is found, absent folders are skipped, and a place that
/// cannot be walked counts as an overlap (fail closed).
@Suite struct FirstOverlapTests {
    @Test func theFirstOverlappingFolderIsNamedAndAnUnwalkableOneFailsClosed() throws {
        let scratch = Scratch()
        for folder in ["a/inner", "b", "c"] {
            try FileManager.default.createDirectory(atPath: scratch.path + "/" + folder, withIntermediateDirectories: true)
        }
        func open(_ name: String) throws -> OwnedDescriptor { try .openPath(FilePath(scratch.path + "/" + name), follow: false) }
        // A file no folder holds any more: its chain cannot be walked.
        _ = FileManager.default.createFile(atPath: scratch.path + "/gone", contents: Data("x".utf8))
        let gone = try open("gone")
        try #require(unlink(scratch.path + "/gone") == 0)

        let a = try open("a"), inner = try open("a/inner"), b = try open("b"), c = try open("c")
        #expect(Ancestry.firstOverlap(of: a, among: [b, c]) == nil)
        #expect(Ancestry.firstOverlap(of: a, among: [b, inner, c]) == 1, "a holds a/inner")
        #expect(Ancestry.firstOverlap(of: inner, among: [nil, b, a]) == 2, "a/inner lies inside a; nil is skipped")
        #expect(Ancestry.firstOverlap(of: a, among: [nil, b, a]) == 2, "a is a")
        #expect(Ancestry.firstOverlap(of: a, among: [b, gone, c]) == 1, "an other that cannot be walked")
        #expect(Ancestry.firstOverlap(of: gone, among: [nil, b, c]) == 1, "a folder that cannot be walked: the first present other")
        #expect(Ancestry.firstOverlap(of: gone, among: [nil, nil]) == nil, "nothing present, nothing to expose")
    }
}

/// The ancestry memory that the denial observer keeps across a command's
/// calls: a child can make folders thousands deep, so it must stay linear.
@Suite struct AncestryWalkerTests {
    @Test func deepFoldersAreRememberedOncePerFolderAndChainsStayExact() throws {
        let scratch = Scratch()
        var path = scratch.path
        var folders: [String] = []
        for _ in 0..<400 {
            path += "/d"
            folders.append(path)
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let walker = Ancestry.Walker()
        // Every level asked once, deepest last, as a command descending would be observed.
        for folder in folders {
            let fd = try OwnedDescriptor.openPath(FilePath(folder), follow: false)
            let remembered = walker.chain(of: fd)
            #expect(remembered == (try Ancestry.chain(of: fd)), "a remembered chain differs from a fresh walk at \(folder.count)")
        }
        let depth = path.split(separator: "/").count
        // A chain per folder would keep about depth²/2 identities; a parent per folder keeps depth.
        #expect(walker.remembered <= depth + 1, "remembered \(walker.remembered) for \(depth) folders")
    }
}
